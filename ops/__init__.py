"""Operational tools that talk to AWS with boto3 outside Pulumi: the read-only preflight check
and the leftovers audit. They know AWS; the lab's settings reach them as plain arguments."""
