"""One broken configuration rule (key, value, rule), and the rules stacks/config.py and
stacks/aws_config.py share; a module of its own so the two need not import each other."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Optional

#: An IAM role ARN (adminRoleArns, aws:assumeRoles).
ROLE_ARN = re.compile(r"arn:aws(-[a-z]+)*:iam::\d{12}:role/[\w+=,.@/-]{1,512}")


@dataclass(frozen=True)
class Violation:
    key: str
    value: Any
    rule: str
    #: The value as the user wrote it (``20``, ``"20"``, ``[]``), when that is known; else the
    #: value is shown as JSON. Pulumi hands the program every value as text, so only a tool
    #: that reads the stack file itself knows whether ``20`` was written quoted.
    written: Optional[str] = None

    def __str__(self) -> str:
        if self.written is not None:
            shown = self.written
        else:
            shown = "(not set)" if self.value is None else json.dumps(self.value)
        return f"{self.key} = {shown}: {self.rule}"
