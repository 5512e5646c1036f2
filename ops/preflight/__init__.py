"""The preflight: read-only checks that an AWS account and this machine can take the lab.

    python -m ops.preflight [--stack dev] [--stack-file PATH] [--region R]

``checks`` holds the boto3 checks, ``cli`` the command that runs them for a stack.
"""
