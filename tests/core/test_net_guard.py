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
        # Shared address space (RFC 6598) and the cloud metadata address inside it.
        "http://100.64.0.1/mcp",
        "http://100.127.255.254/mcp",
        "http://100.100.100.200/latest/meta-data",
        # IETF protocol assignments, all of 192.0.0.0/24.
        "http://192.0.0.1/mcp",
        "http://192.0.0.9/mcp",
        "http://192.0.0.255/mcp",
        "http://172.16.0.1/mcp",
        "http://198.18.0.1/mcp",
        "http://192.88.99.1/mcp",
        "http://240.0.0.1/mcp",
        "http://255.255.255.255/mcp",
        "http://168.63.129.16/metadata",
        "http://[fd00:ec2::254]/latest/meta-data",
        # 6to4 wrapping loopback, private, shared and metadata IPv4 addresses.
        "http://[2002:7f00:1::]/mcp",
        "http://[2002:7f00:1::1]:8080/mcp",
        "http://[2002:a00:1::]/mcp",
        "http://[2002:6464:64c8::]/mcp",
        "http://[2002:a9fe:a9fe::]/mcp",
        # NAT64 (well-known prefix) wrapping internal IPv4, and the local-use NAT64 prefix.
        "http://[64:ff9b::7f00:1]/mcp",
        "http://[64:ff9b::a9fe:a9fe]/mcp",
        "http://[64:ff9b::6464:64c8]/mcp",
        "http://[64:ff9b:1::5db8:d70e]/mcp",
        # IPv4-mapped and IPv4-compatible forms.
        "http://[::ffff:10.0.0.1]/mcp",
        "http://[::ffff:100.100.100.200]/mcp",
        "http://[::ffff:192.0.0.9]/mcp",
        "http://[::127.0.0.1]/mcp",
        "http://[::93.184.215.14]/mcp",
        # Teredo (the client address is obfuscated), ULA, link-local, site-local, multicast, discard.
        "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/mcp",
        "http://[fc00::1]/mcp",
        "http://[fe80::1]/mcp",
        "http://[fec0::1]/mcp",
        "http://[ff02::1]/mcp",
        "http://[100::1]/mcp",
        "http://[::]/mcp",
        # Numeric host spellings that resolve to loopback.
        "http://2130706433/mcp",
        "http://0x7f000001/mcp",
        "http://127.1/mcp",
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
        # The wrapping forms pass when what they wrap is public: NAT64 and 6to4 of a public address.
        for url in (
            "https://[2606:4700::1111]/mcp",
            "https://[64:ff9b::5db8:d70e]/mcp",
            "https://[2002:5db8:d70e::1]/mcp",
            "https://[::ffff:93.184.215.14]/mcp",
        ):
            assert check_outbound_url(url) == url
        monkeypatch.setitem(app.config, "OUTBOUND_ALLOWED_HOSTS", ["127.0.0.1"])
        assert check_outbound_url("http://127.0.0.1:9/mcp") == "http://127.0.0.1:9/mcp"


def test_every_metadata_address_is_inside_a_denied_range():
    from app.core.net_guard import DENIED_NETWORKS, METADATA_ADDRESSES

    for address in METADATA_ADDRESSES:
        assert any(
            address in network for network, _why in DENIED_NETWORKS if network.version == address.version
        )
