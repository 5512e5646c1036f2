"""Reusable Pulumi components, one concern per module. They know nothing of this lab's config."""
