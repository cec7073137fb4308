"""The helpers that replaced repeated code: backoff, as_int, addresses."""

from __future__ import annotations

from specconsole.base.backoff import Backoff
from specconsole.base.values import as_int
from specconsole.config import HostConfig
from specconsole.hosts.address import ssh_address, url_endpoint


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    b = Backoff()
    assert [b.next() for _ in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0]
    assert b.reset() == 0.5 and b.next() == 0.5
    small = Backoff(0.5, 4)
    assert [small.double() for _ in range(4)] == [1.0, 2.0, 4.0, 4.0]


def test_as_int_reads_ints_from_text_and_json() -> None:
    assert [as_int(v) for v in (16, "16", " +16 ", "-1", 16.0)] == [16, 16, 16, -1, 16]
    assert [as_int(v) for v in (True, "16.5", "auto", None, 16.5, "", "+")] == [None] * 7


def test_ssh_address_and_url_endpoint() -> None:
    assert ssh_address(HostConfig("a", "train", "ssh", host="gpu-1", port=2222, user="ops")) == "ops@gpu-1:2222"
    assert ssh_address(HostConfig("a", "train", "ssh", host="gpu-1")) == "gpu-1"
    assert url_endpoint("http://10.0.0.5:30000/v1") == ("http", "10.0.0.5", 30000)
    assert url_endpoint("https://serve.internal") == ("https", "serve.internal", 443)
    assert url_endpoint("http://serve") == ("http", "serve", 80)


def test_output_line_takes_a_tracebacks_exception_not_its_first_line() -> None:
    """Issue 24 item 15: a lab systemctl traceback's first line reached an error message."""
    from specconsole.base.values import output_line

    tb = ("Traceback (most recent call last):\n  File \"/usr/bin/systemctl3\", line 7, in <module>\n"
          "    sys.exit(main())\n           ^^^^^^\nKeyError: 'sglang.service'\n")
    assert output_line(tb) == "KeyError: 'sglang.service'"
    assert output_line("Unit sglang.service could not be found.\nmore\n") == "Unit sglang.service could not be found."
    assert output_line("\x1b[31mred\n") == "\\x1b[31mred" and output_line("") == ""
    assert output_line("x" * 300, 10) == "xxxxxxxxx…"
