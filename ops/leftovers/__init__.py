"""The leftovers audit: read-only proof that a destroyed stack left nothing behind.

    python -m ops.leftovers [--stack dev] [--stack-file PATH] [--region R] [--json]

``audit`` holds the boto3 scan, ``cli`` the command that runs it for a stack.
"""
