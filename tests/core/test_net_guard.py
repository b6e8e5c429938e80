"""The outbound URL guard refuses loopback, private, link-local and metadata targets unless allow-listed."""

import pytest

from app.core.net_guard import UnsafeUrl, check_outbound_url


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/mcp",
        "http://localhost/mcp",
        "http://10.1.2.3/mcp",
        "http://192.168.0.10/mcp",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/mcp",
        "http://[::ffff:127.0.0.1]/mcp",
        "http://0.0.0.0/mcp",
        "ftp://example.com/mcp",
        "https://user:pw@example.com/mcp",
        "not a url",
        "",
    ],
)
def test_refuses_unsafe_targets(app, url):
    with app.app_context(), pytest.raises(UnsafeUrl):
        check_outbound_url(url)


def test_public_addresses_and_allow_listed_hosts_pass(app, monkeypatch):
    with app.app_context():
        assert check_outbound_url("https://93.184.215.14/mcp") == "https://93.184.215.14/mcp"
        monkeypatch.setitem(app.config, "OUTBOUND_ALLOWED_HOSTS", ["127.0.0.1"])
        assert check_outbound_url("http://127.0.0.1:9/mcp") == "http://127.0.0.1:9/mcp"
