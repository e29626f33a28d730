"""Who may read and who may act, the CSRF check and the user file — over the real app.

The app is driven with Starlette's test client against a real Redis; every refusal is
checked both by its status and by the gate or DLQ it must have left unchanged.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import structlog
from starlette.testclient import TestClient

from tidegate.console import ConsoleConfig, Users, create_app, hash_secret
from tidegate.console.access import Role
from tidegate.console.csrf import CsrfTokens
from tidegate.errors import ConfigurationError
from tidegate.flow import Gate
from tidegate.keys import GateKeys, Keyspace

pytestmark = pytest.mark.redis

User = tuple[str, Role, str]

SECRET = b"console-test-csrf-secret"


def basic(user: tuple[str, Role, str]) -> dict[str, str]:
    name, _, secret = user
    return {"Authorization": "Basic " + base64.b64encode(f"{name}:{secret}".encode()).decode()}


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None
    return found.group(1)


@pytest.fixture
def app_client(
    redis_client: redis.Redis, prefix: str, make_users: Callable[..., Users]
) -> Iterator[TestClient]:
    Gate(redis_client, "customs", prefix=prefix).configure(rate=2.0)
    config = ConsoleConfig(
        users=make_users(), prefix=prefix, gates=("customs",), csrf_secret=SECRET
    )
    with TestClient(create_app(redis_client, config), base_url="http://console.test") as client:
        yield client


def test_no_credentials_no_page(app_client: TestClient) -> None:
    """Reading without credentials is off by default: 401 with a Basic challenge."""
    answer = app_client.get("/")
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Basic ")
    assert "customs gateway" not in answer.text


def test_wrong_secret_is_refused(app_client: TestClient) -> None:
    """A known user with a wrong secret reads nothing."""
    answer = app_client.get("/", headers=basic(("ana", Role.OPERATOR, "not-her-secret")))
    assert answer.status_code == 401


def test_anonymous_read_when_allowed_but_never_an_action(
    redis_client: redis.Redis, prefix: str, make_users: Callable[..., Users]
) -> None:
    """With anonymous reading on, the page shows without credentials, but no action
    form is rendered and a POST without credentials is refused."""
    config = ConsoleConfig(
        users=make_users(allow_anonymous_read=True), prefix=prefix, gates=("customs",)
    )
    with TestClient(create_app(redis_client, config), base_url="http://console.test") as client:
        page = client.get("/")
        assert page.status_code == 200
        assert "customs gateway" in page.text
        assert 'action="/act/pause"' not in page.text
        answer = client.post(
            "/act/pause",
            data={
                "csrf": csrf_of_anonymous(page.text),
                "target": "customs",
                "seconds": "60",
                "confirmed": "yes",
            },
        )
    assert answer.status_code == 403
    assert Gate(redis_client, "customs", prefix=prefix).state().paused_for_s == 0


def csrf_of_anonymous(page: str) -> str:
    """The anonymous page carries no form, so no token: a forger has only guesses."""
    assert 'name="csrf"' not in page
    return "0" * 64


def test_bearer_token_reads_like_basic(app_client: TestClient, viewer: User) -> None:
    """A wall display or a script signs in with ``Bearer name:token``."""
    name, _, secret = viewer
    answer = app_client.get("/live/gates", headers={"Authorization": f"Bearer {name}:{secret}"})
    assert answer.status_code == 200
    assert "customs gateway" in answer.text


def test_viewer_cannot_act_even_with_a_valid_token(
    app_client: TestClient,
    redis_client: redis.Redis,
    prefix: str,
    viewer: User,
) -> None:
    """A viewer's page has no action forms; a POST they craft with their own valid CSRF
    token is refused 403, audited, and the gate is not paused."""
    page = app_client.get("/", headers=basic(viewer))
    assert page.status_code == 200
    assert 'action="/act/pause"' not in page.text
    with structlog.testing.capture_logs() as logs:
        answer = app_client.post(
            "/act/pause",
            headers=basic(viewer),
            data={
                "csrf": CsrfTokens(SECRET).token_for("vic"),
                "target": "customs",
                "seconds": "60",
                "confirmed": "yes",
            },
        )
    assert answer.status_code == 403
    assert "viewer" in answer.text
    assert Gate(redis_client, "customs", prefix=prefix).state().paused_for_s == 0
    audit = [e for e in logs if e["event"] == "console_action"]
    assert [(e["user"], e["action"], e["result"], e["error"]) for e in audit] == [
        ("vic", "pause", "refused", "Forbidden")
    ]


@pytest.mark.parametrize("token", [None, "", "0" * 64])
def test_forged_post_without_the_csrf_token_is_refused(
    app_client: TestClient,
    redis_client: redis.Redis,
    prefix: str,
    token: str | None,
    operator: User,
) -> None:
    """An operator's credentials alone (what a browser adds to a forged cross-site form)
    do not act: without this console's token the POST is refused and nothing changes."""
    form = {"target": "customs", "seconds": "60", "confirmed": "yes"}
    if token is not None:
        form["csrf"] = token
    answer = app_client.post("/act/pause", headers=basic(operator), data=form)
    assert answer.status_code == 403
    assert "CSRF" in answer.text
    assert Gate(redis_client, "customs", prefix=prefix).state().paused_for_s == 0


def test_post_from_another_origin_is_refused_even_with_the_token(
    app_client: TestClient,
    redis_client: redis.Redis,
    prefix: str,
    operator: User,
) -> None:
    """A browser names the page a POST comes from: another site is refused."""
    page = app_client.get("/", headers=basic(operator))
    answer = app_client.post(
        "/act/pause",
        headers={**basic(operator), "Origin": "http://evil.test"},
        data={"csrf": csrf_of(page.text), "target": "customs", "seconds": "60", "confirmed": "yes"},
    )
    assert answer.status_code == 403
    assert Gate(redis_client, "customs", prefix=prefix).state().paused_for_s == 0


def test_pause_asks_for_confirmation_then_pauses_and_audits(
    app_client: TestClient,
    redis_client: redis.Redis,
    prefix: str,
    operator: User,
) -> None:
    """The first POST only shows a confirmation page; the confirmed one pauses the gate
    in Redis and writes one ``console_action`` event with the operator's name."""
    gate = Gate(redis_client, "customs", prefix=prefix)
    page = app_client.get("/", headers=basic(operator))
    form = {"csrf": csrf_of(page.text), "target": "customs", "seconds": "120", "reason": "berth 4"}
    headers = {**basic(operator), "Origin": "http://console.test"}
    asked = app_client.post("/act/pause", headers=headers, data=form)
    assert asked.status_code == 200
    assert 'name="confirmed" value="yes"' in asked.text
    assert gate.state().paused_for_s == 0
    with structlog.testing.capture_logs() as logs:
        done = app_client.post("/act/pause", headers=headers, data={**form, "confirmed": "yes"})
    assert done.status_code == 200
    state = gate.state()
    assert 100 < state.paused_for_s <= 120
    assert state.pause_reason == "console: berth 4"
    audit = [e for e in logs if e["event"] == "console_action"]
    assert len(audit) == 1
    assert audit[0]["user"] == "ana"
    assert audit[0]["role"] == "operator"
    assert audit[0]["target"] == "customs"
    assert audit[0]["result"] == "done"
    assert audit[0]["pause_s"] == 120.0


@pytest.mark.parametrize(
    "case",
    [
        ("retune", {"rate": "-1"}),
        ("retune", {"burst": "1.5"}),
        ("retune", {}),
        ("pause", {"seconds": "inf"}),
        ("pause", {"seconds": "0"}),
        ("replay", {"rate": "5", "limit": "10"}),  # replay is off: no publisher
    ],
)
def test_bad_action_is_a_400_and_writes_nothing(
    app_client: TestClient,
    redis_client: redis.Redis,
    prefix: str,
    case: tuple[str, dict[str, str]],
    operator: User,
) -> None:
    """Out-of-range, missing or unavailable: refused with a reason, the gate unchanged."""
    action, form = case
    gate = Gate(redis_client, "customs", prefix=prefix)
    before = gate.state()
    page = app_client.get("/", headers=basic(operator))
    answer = app_client.post(
        f"/act/{action}",
        headers=basic(operator),
        data={"csrf": csrf_of(page.text), "target": "customs", "confirmed": "yes", **form},
    )
    assert answer.status_code == 400
    after = gate.state()
    assert (after.policy, after.paused_for_s) == (before.policy, before.paused_for_s)


def test_an_unknown_gate_is_refused_and_gets_no_keys(
    app_client: TestClient, redis_client: redis.Redis, prefix: str, operator: User
) -> None:
    """A gate the console does not show (a typo, a forged name) is a 400, and no key of
    it is written."""
    page = app_client.get("/", headers=basic(operator))
    answer = app_client.post(
        "/act/pause",
        headers=basic(operator),
        data={"csrf": csrf_of(page.text), "target": "custom", "seconds": "60", "confirmed": "yes"},
    )
    assert answer.status_code == 400
    keys = Keyspace(prefix).limit("custom")
    assert redis_client.exists(*(getattr(keys, f) for f in GateKeys.__slots__)) == 0


def test_unknown_action_is_refused(
    app_client: TestClient,
    operator: User,
) -> None:
    page = app_client.get("/", headers=basic(operator))
    answer = app_client.post(
        "/act/purge", headers=basic(operator), data={"csrf": csrf_of(page.text), "confirmed": "yes"}
    )
    assert answer.status_code == 400


def test_users_file_round_trip_and_errors(tmp_path: Path) -> None:
    """A well-formed file signs its users in; a malformed one is a ConfigurationError
    that never quotes a secret."""
    good = tmp_path / "users.json"
    good.write_text(
        json.dumps(
            {
                "users": [
                    {
                        "name": "ana",
                        "role": "operator",
                        "secret": hash_secret("s3cret-pass", iterations=1000),
                    }
                ]
            }
        )
    )
    users = Users.from_file(good)
    header = "Basic " + base64.b64encode(b"ana:s3cret-pass").decode()
    assert users.authenticate(header).role is Role.OPERATOR
    for bad in (
        {"users": [{"name": "ana", "role": "admin", "secret": hash_secret("x", iterations=1)}]},
        {"users": [{"name": "ana", "role": "viewer", "secret": "plain-text-password"}]},
        {"people": []},
    ):
        good.write_text(json.dumps(bad))
        with pytest.raises(ConfigurationError) as caught:
            Users.from_file(good)
        assert "plain-text-password" not in str(caught.value)
    with pytest.raises(ConfigurationError):
        Users([("ana", Role.VIEWER, hash_secret("a", iterations=1))] * 2)
