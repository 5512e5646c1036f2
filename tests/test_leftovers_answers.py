"""The leftovers audit under an endpoint that answers with an HTML page (a proxy, a captive
portal, a wrong endpoint): one line with the HTTP status, never the page, and the audit is
still incomplete. The endpoint is a loopback HTTP server; STS answers as AWS does."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import boto3
import pytest

from ops.leftovers import audit
from ops.leftovers import cli as command
from ops.leftovers.answers import one_line

REGION = "ap-northeast-2"
ACCOUNT = "123456789012"
TITLE = "403 Forbidden"
PAGE = (f"<html>\n<head><title>{TITLE}</title></head>\n<body>\n<center><h1>{TITLE}</h1>"
        "</center>\n<hr><center>nginx</center>\n</body>\n</html>\n").encode()
# GetCallerIdentity as STS answers it (the Query protocol's XML).
IDENTITY = (f'<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
            f"<GetCallerIdentityResult><Arn>arn:aws:iam::{ACCOUNT}:user/auditor</Arn>"
            f"<UserId>AIDAEXAMPLE</UserId><Account>{ACCOUNT}</Account></GetCallerIdentityResult>"
            "<ResponseMetadata><RequestId>1</RequestId></ResponseMetadata>"
            "</GetCallerIdentityResponse>").encode()


class Endpoint(http.server.ThreadingHTTPServer):
    status = 403
    #: Whether STS answers too with the page.
    sts_too = False


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if b"Action=GetCallerIdentity" in body and not self.server.sts_too:
            self._answer(200, "text/xml", IDENTITY)
        else:
            self._answer(self.server.status, "text/html", PAGE)

    do_GET = do_POST

    def _answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def endpoint():
    server = Endpoint(("127.0.0.1", 0), Handler)
    # shutdown() waits for the loop's next poll: 0.5 s by default, at the module's end.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@functools.lru_cache(maxsize=None)
def _module_session() -> boto3.session.Session:
    """Speed only: one boto3 session for the module's tests (a new one parses EC2's model
    again, ~0.1 s); its clients are still made per test."""
    return boto3.session.Session(aws_access_key_id="AKIDEXAMPLE",
                                 aws_secret_access_key="secret", region_name=REGION)


class EndpointSession:
    """Clients of one boto3 session, every one pointed at the loopback endpoint."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session = _module_session()

    def client(self, service: str, **kwargs):
        return self.session.client(service, endpoint_url=self.url, **kwargs)


@pytest.fixture
def session(endpoint, monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY",
                 "all_proxy", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    # Two checks, one EC2 (XML) and one EKS (JSON): botocore hands the page on differently.
    monkeypatch.setattr(audit, "CHECKS", tuple(
        (name, check) for name, check in audit.CHECKS if name in ("VPCs", "EKS cluster")))
    return EndpointSession(f"http://127.0.0.1:{endpoint.server_port}")


def stack_file(directory: Path) -> Path:
    path = directory / "Pulumi.dev.yaml"
    path.write_text(f"config:\n  aws:region: {REGION}\n")
    return path


@pytest.mark.parametrize("status", [403, 503])
def test_an_html_page_is_one_line_and_the_audit_stays_incomplete(status, endpoint, session,
                                                                 tmp_path, capsys):
    endpoint.status, endpoint.sts_too = status, False
    code = command.main(["--stack-file", str(stack_file(tmp_path))], session=session)
    out, err = capsys.readouterr()
    assert code == 2
    assert "<" not in out + err and "nginx" not in out + err
    assert f"  VPCs: HTTP {status} from ec2 DescribeVpcs: {TITLE} (an HTML page" in out
    assert f"  EKS cluster: HTTP {status} from eks DescribeCluster: {TITLE} (an HTML page" in out
    assert "Could not check (the audit is incomplete)" in out
    assert "nothing of stack" not in out
    assert "2 of 2 checks could not run" in err


def test_an_html_page_from_sts_stops_the_audit_in_one_line(endpoint, session, tmp_path, capsys):
    endpoint.status, endpoint.sts_too = 403, True
    code = command.main(["--stack-file", str(stack_file(tmp_path))], session=session)
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.startswith(f"error: cannot query AWS in {REGION} for stack dev: HTTP 403 from sts "
                          f"GetCallerIdentity: {TITLE} (an HTML page")
    assert "<" not in err


def test_the_line_of_a_page_without_a_title_is_its_first_text():
    assert one_line(b"<html><body>\n<p>Access  denied &amp; logged</p></body></html>") == \
        "Access denied & logged"
    assert one_line(b"<html></html>") == "(an empty page)"
    assert len(one_line(b"<title>" + b"x" * 500 + b"</title>")) == 120
