"""What `pulumi up` runs: the lab's config, the six layers and their wiring, the exports and the cost estimate they carry."""
