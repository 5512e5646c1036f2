"""Destroy-time cleanups: dynamic resources that remove what AWS or a controller created on the
stack's behalf and Pulumi does not own. Each runs its ``delete`` at the point of the graph where
that is safe, and acts only on what belongs to this stack."""
