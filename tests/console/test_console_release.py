"""Replaying the quarantine from the page: who may, what is checked before anything is
sent, what the audit event says — over the real app and a real Redis.

The intake side is a recording stand-in here (what it sends is proved end to end in
``test_console_fleet.py``, where a real worker delivers the document to the simulated
gateway); these tests are about the console's checks in front of it.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterator

import pytest
import redis
import structlog
from starlette.testclient import TestClient

from tidegate.console import ConsoleConfig, Users, create_app
from tidegate.console.access import Role
from tidegate.console.csrf import CsrfTokens
from tidegate.load.admission import ReplayReport
from tidegate.load.quarantine import Quarantine, QuarantinedDocument

pytestmark = pytest.mark.redis

User = tuple[str, Role, str]

SECRET = b"console-test-csrf-secret"


def basic(user: User) -> dict[str, str]:
    name, _, secret = user
    return {"Authorization": "Basic " + base64.b64encode(f"{name}:{secret}".encode()).decode()}


class Recorder:
    """Stands in for the intake: records each replay asked for, reports one replayed."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, bool]] = []

    def __call__(self, queue: str, limit: int, force: bool) -> ReplayReport:
        self.calls.append((queue, limit, force))
        report = ReplayReport(queue, replayed=1, released=0, skipped=0)
        report.by_class["BULK_BL_PDF"] += 1
        return report


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def app_client(
    redis_client: redis.Redis,
    prefix: str,
    make_users: Callable[..., Users],
    recorder: Recorder,
) -> Iterator[TestClient]:
    Quarantine(redis_client, prefix=prefix).add(
        QuarantinedDocument(
            key="pdf-0001",
            document_class="BULK_BL_PDF",
            queue="bulk.documents",
            task="bulk.documents.store",
            payload={"pdf": "SECRET-PAYLOAD"},
        )
    )
    config = ConsoleConfig(
        users=make_users(),
        prefix=prefix,
        replay_quarantine=recorder,
        csrf_secret=SECRET,
        history_every_s=0,
    )
    with TestClient(create_app(redis_client, config), base_url="http://console.test") as client:
        yield client


def _post(client: TestClient, user: User, **form: str) -> tuple[int, str]:
    page = client.get("/", headers=basic(user))
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    # A viewer's page carries no form: give them a valid token, so only the role refuses.
    token = found.group(1) if found else CsrfTokens(SECRET).token_for(user[0])
    answer = client.post(
        "/act/replay-quarantine",
        headers={**basic(user), "Origin": "http://console.test"},
        data={"csrf": token, **form},
    )
    return answer.status_code, answer.text


def test_the_page_offers_the_queues_that_hold_documents(
    app_client: TestClient, operator: User
) -> None:
    """The form lists the quarantined documents' queue by its port name; no payload."""
    page = app_client.get("/", headers=basic(operator)).text
    assert '<option value="bulk.documents">bulk documents (B/L PDFs, archive)</option>' in page
    assert "SECRET-PAYLOAD" not in page


def test_confirm_then_replay_and_audit(
    app_client: TestClient, operator: User, recorder: Recorder
) -> None:
    """The first POST asks; the confirmed one replays with the operator's limit and force,
    and one ``console_action`` event names who, which queue and what happened."""
    status, text = _post(app_client, operator, target="bulk.documents", limit="25")
    assert status == 200
    assert "Confirm: replay-quarantine" in text
    assert recorder.calls == []
    with structlog.testing.capture_logs() as logs:
        status, text = _post(
            app_client, operator, target="bulk.documents", limit="25", force="yes", confirmed="yes"
        )
    assert status == 200
    assert "replayed 1, put back 0" in text
    assert recorder.calls == [("bulk.documents", 25, True)]
    (audit,) = [e for e in logs if e["event"] == "console_action"]
    assert (audit["user"], audit["action"], audit["result"]) == (
        "ana",
        "replay-quarantine",
        "done",
    )
    assert (audit["queue"], audit["replayed"], audit["by_class"]) == (
        "bulk.documents",
        1,
        {"BULK_BL_PDF": 1},
    )


@pytest.mark.parametrize(
    "form",
    [
        {"target": "edi.customs", "limit": "1"},  # nothing quarantined there
        {"target": "bulk.documents", "limit": "0"},
        {"target": "bulk.documents", "limit": "5000"},
        {"target": "bulk.documents"},
    ],
)
def test_a_bad_replay_is_refused_before_the_intake(
    app_client: TestClient, operator: User, recorder: Recorder, form: dict[str, str]
) -> None:
    """Unknown queue, limit out of range or missing: 400, nothing sent."""
    status, _ = _post(app_client, operator, confirmed="yes", **form)
    assert status == 400
    assert recorder.calls == []


def test_a_viewer_cannot_replay_the_quarantine(
    app_client: TestClient, viewer: User, recorder: Recorder
) -> None:
    """A viewer's confirmed POST, with a valid CSRF token, is refused 403 for the role and
    audited as refused; nothing sent."""
    with structlog.testing.capture_logs() as logs:
        status, text = _post(
            app_client, viewer, target="bulk.documents", limit="1", confirmed="yes"
        )
    assert status == 403
    assert "actions need an operator" in text
    assert recorder.calls == []
    assert [e["result"] for e in logs if e["event"] == "console_action"] == ["refused"]


def test_replay_is_off_without_an_intake(
    redis_client: redis.Redis,
    prefix: str,
    make_users: Callable[..., Users],
    operator: User,
) -> None:
    """A console started without a broker says so on the page and refuses the action."""
    Quarantine(redis_client, prefix=prefix).add(
        QuarantinedDocument(key="k", document_class="IFTSTA", queue="edi.tos", task="t")
    )
    config = ConsoleConfig(users=make_users(), prefix=prefix, csrf_secret=SECRET, history_every_s=0)
    with TestClient(create_app(redis_client, config), base_url="http://console.test") as client:
        assert "Replay is off" in client.get("/", headers=basic(operator)).text
        status, text = _post(client, operator, target="edi.tos", limit="1", confirmed="yes")
    assert status == 400
    assert "replaying the quarantine is off" in text
