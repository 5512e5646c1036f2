"""The token a hybrid host labels its Node with, so that its Node cleanup selects that Node and
no other host's.

One per host *generation* (a hash of what the host boots with, hybrid_user_data.boot_generation):
a new generation replaces it, and ``create`` mints a new token, never made twice. A selector of
the generation alone was not enough: reverting a change brings an old generation back, and a
cleanup of the old generation (pending delete after an interrupted update) would select the live
host's Node. The token is minted here, not by the cleanup, because the host must not wait for
its cleanup: the cleanup depends on the host (it terminates it before it deletes the Node,
node_objects.py), and the host boots while EKS creates the control plane. This resource depends
on nothing the cluster makes, so the host can be created as soon as the network, the role and
the activation exist.

It holds no cloud object: ``create`` mints, ``delete`` does nothing.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi.dynamic

from components.cleanup.self_contained import self_contained


@self_contained
class HostTokenProvider(pulumi.dynamic.ResourceProvider):
    """Dynamic provider: ``create`` mints the token; a new generation replaces it."""

    serialize_as_secret_always = False

    #: Where ``create`` reads a new token from; the offline plan's stand-in cloud swaps it for a
    #: deterministic one, as it freezes the clock, so its runs repeat.
    def new_token(self) -> str:
        import uuid

        # 122 random bits: no two hosts, of this stack or any, ever get the same token.
        return uuid.uuid4().hex

    def check_props(self, props: dict[str, Any]) -> dict[str, str]:
        generation = props.get("generation")
        if not isinstance(generation, str) or not generation.strip():
            raise ValueError("a host token needs the host's generation")
        return {"generation": generation}

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        outs = self.check_props(props)
        token = self.new_token()
        return pulumi.dynamic.CreateResult(f"host-token-{token[:12]}", {**outs, "token": token})

    def diff(self, _id: str, olds: dict[str, Any],
             news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        # A new generation is a new host: a new token. New code alone keeps the token (the host
        # carries it, and a new one would replace the host).
        replaces = ["generation"] if olds.get("generation") != news.get("generation") else []
        code_changed = olds.get("__provider") != news.get("__provider")
        return pulumi.dynamic.DiffResult(changes=bool(replaces) or code_changed,
                                         replaces=replaces, delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any],
               news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        return pulumi.dynamic.UpdateResult({**self.check_props(news), "token": olds["token"]})

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None  # nothing in the cloud: the token lives only in the host's Node labels


class HostToken(pulumi.dynamic.Resource, module="cleanup", name="HybridHostToken"):
    """A token minted per host generation; label the host's Node ``<token label>=<token>``."""

    generation: pulumi.Output[str]
    token: pulumi.Output[str]

    def __init__(self, name: str, generation: pulumi.Input[str],
                 opts: Optional[pulumi.ResourceOptions] = None) -> None:
        super().__init__(HostTokenProvider(), name, {"generation": generation, "token": None},
                         opts)
