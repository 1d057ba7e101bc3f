"""``cb memory maintain --json`` prints proto3 JSON names (lowerCamelCase) like every other ``--json`` of
the CLI that prints a service's answer; run on a database of its own, so no other test's memories move."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from common.kernel.config import Settings
from memory_service_tools.cli import app

pytestmark = pytest.mark.e2e


def test_maintain_json_uses_the_clis_camel_case(fresh_settings: Settings) -> None:
    result = CliRunner().invoke(
        app, ["memory", "maintain", "--json"], env={"CB_DATABASE_URL": fresh_settings.database_url}
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "movedToWarm": 0,
        "movedToCold": 0,
        "expiredDeleted": 0,
        "auditEventIds": [],
    }
