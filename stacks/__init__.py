"""This lab: its config, the six layers and their wiring, exports and the offline plan."""
