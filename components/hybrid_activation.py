"""The SSM hybrid activation hosts register with, and what keeps it trustworthy: an expiry
that is fixed when it is created (not recomputed at every preview), a secret code, and the
deregistration of the managed instances that registered through it once they are gone."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
import pulumi_aws as aws

from components.aws_account import AwsAccount
from components.cleanup.ssm_registrations import SsmRegistrationCleanup
from components.expiry import Expiry


#: SSM accepts an activation expiry at most 30 days after *its* clock. The expiry is computed
#: from the deployer's clock, which may run a little fast: an expiry an hour short of the limit
#: still passes with a clock up to an hour ahead.
SSM_MAX_VALID_DAYS = 30
CLOCK_MARGIN_MINUTES = 60


@dataclass(frozen=True)
class HybridActivationArgs:
    #: The IAM role the registered machines act as (its name, as SSM wants it).
    role_name: pulumi.Input[str]
    #: The cluster the hosts join, tagged on the activation (EKSClusterARN) and so copied onto
    #: every managed instance that registers: the node role's right to deregister is scoped by
    #: that tag.
    cluster_arn: pulumi.Input[str]
    #: The activation's region: the registrations cleanup deregisters managed instances there.
    region: str
    #: How many machines may register through the activation; SSM refuses one more. Every
    #: registration counts, a deregistered host's and a re-join's too, and each replaced host
    #: registers again: a RegistrationBudget (components/cleanup/registration_budget.py) in
    #: front of the hosts stops a change that needs more than are left.
    registration_limit: int
    #: Days the activation accepts registrations (SSM allows at most 30).
    valid_days: int
    #: A new generation makes a new activation (and a new expiry).
    generation: int
    #: The activation's name, as the SSM console lists it.
    name: str
    #: The activation's description: what it is for, beside its name in the console.
    description: str
    #: The role's policies: registered machines need them from their first call.
    wait_for: Sequence[pulumi.Resource] = ()
    #: The credentials the destroy-time cleanup acts with: the program's (aws_account.py).
    account: AwsAccount = AwsAccount()


class HybridActivation(pulumi.ComponentResource):
    expiry: Expiry
    activation: aws.ssm.Activation
    #: Hosts depend on it: at destroy it runs after them and deregisters what they left.
    registrations_cleanup: SsmRegistrationCleanup
    activation_id: pulumi.Output[str]
    activation_code: pulumi.Output[str]
    expires_at: pulumi.Output[str]

    def __init__(self, name: str, args: HybridActivationArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("eks-hybrid-lab:hybrid:HybridActivation", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # Fixed at creation: an expiry computed from "now" on every run would replace the
        # activation, and with it every host, at each preview.
        if not 0 < args.valid_days <= SSM_MAX_VALID_DAYS:
            raise ValueError(f"valid_days must be 1 to {SSM_MAX_VALID_DAYS} (SSM's limit), "
                             f"got {args.valid_days}")
        self.expiry = Expiry(f"{name}-expiry", days=args.valid_days, generation=args.generation,
                             margin_minutes=CLOCK_MARGIN_MINUTES, opts=child)
        self.expires_at = self.expiry.expires_at
        self.activation = aws.ssm.Activation(
            f"{name}-ssm",
            name=args.name,
            description=args.description,
            iam_role=args.role_name,
            registration_limit=args.registration_limit,
            expiration_date=self.expiry.expires_at,
            # Copied onto every managed instance that registers; the node role's right to
            # deregister is scoped by it.
            tags={"EKSClusterARN": args.cluster_arn},
            opts=pulumi.ResourceOptions(
                parent=self,
                # pulumi-aws does not mark the code secret; it is one.
                additional_secret_outputs=["activationCode"],
                depends_on=list(args.wait_for),
            ),
        )
        self.activation_id = self.activation.id
        self.activation_code = pulumi.Output.secret(self.activation.activation_code)
        # Deleting an activation does not deregister its managed instances (billed): this does,
        # for this activation's instances only.
        self.registrations_cleanup = SsmRegistrationCleanup(
            f"{name}-registrations", activation_id=self.activation.id, region=args.region,
            account=args.account, opts=child)
        self.register_outputs({"activationId": self.activation_id, "expiresAt": self.expires_at})
