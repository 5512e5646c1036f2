"""The layer component every layer is: the top of `pulumi stack`'s resource tree."""

from __future__ import annotations

from typing import Optional

import pulumi


class Layer(pulumi.ComponentResource):
    """A layer of the lab (type ``eks-hybrid-lab:layer:<Kind>``).

    Layers are never chained with ``depends_on``: that would make every child of a layer wait
    for all of the previous layer to be created. Resources declare the dependencies they really
    have, on resources of their own or an earlier layer.
    """

    def __init__(self, kind: str, name: str, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(f"eks-hybrid-lab:layer:{kind}", name, None, opts)

    def child_name(self, suffix: str) -> str:
        """The name of a resource this layer owns: children are named from their parent."""
        return f"{self.pulumi_resource_name}-{suffix}"

    def child(self, **kwargs) -> pulumi.ResourceOptions:
        """Options for a resource this layer owns."""
        return pulumi.ResourceOptions(parent=self, **kwargs)
