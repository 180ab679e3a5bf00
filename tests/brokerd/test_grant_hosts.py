"""Grants that name internal destinations: IP literals in ``[sandbox] hosts`` and
``[sandbox] internal`` parse to canonical forms, mistakes name their key, the call's spec
carries them to the egress proxy, and ``grants check`` says what they reach."""

from __future__ import annotations

from pathlib import Path

import pytest
from brokerd.errors import GrantError
from brokerd.policy import CallArguments, decide, parse_grant
from brokerd.policy.grants import explain_grant
from brokerd.taint import CLEAN
from brokerd_support import NOW, request

FETCH = 'tools = ["http.fetch"]\nmode = "auto"\nclasses = ["public"]\n[sandbox]\n'


def parse(sandbox: str):
    return parse_grant(FETCH + sandbox, "g.toml", home=Path("/home/o"), resolve=lambda p: p)


@pytest.mark.parametrize(
    ("entry", "kept"),
    [
        ("docs.python.org", "docs.python.org"),
        ("Docs.Python.org:8443", "docs.python.org:8443"),
        ("10.0.0.5", "10.0.0.5"),
        ("10.0.0.5:8080", "10.0.0.5:8080"),
        ("[FD7A:115C:A1E0:0::5]", "[fd7a:115c:a1e0::5]"),
        ("[fd7a:115c:a1e0::5]:8080", "[fd7a:115c:a1e0::5]:8080"),
    ],
)
def test_hosts_entries_are_kept_in_canonical_form(entry, kept):
    assert parse(f'hosts = ["{entry}"]').hosts == (kept,)


@pytest.mark.parametrize(
    ("sandbox", "problem"),
    [
        ('hosts = ["fd7a::5"]', "write an IPv6 address in brackets"),
        ('hosts = ["[10.0.0.5]:80"]', "write an IPv6 address as [address]"),
        ('hosts = ["[fe80::1%eth0]"]', "write an IPv6 address as [address]"),
        ('hosts = ["10.0.0.5:0"]', "bad port"),
        ('hosts = ["x.test"]\ninternal = ["10.0.0.5/8"]', "host bits set"),
        ('hosts = ["x.test"]\ninternal = ["eth0"]', "not an IP address or network"),
        ('hosts = ["x.test"]\ninternal = ["fe80::/10%eth0"]', "not an IP address or network"),
        ('internal = ["10.0.0.0/8"]', "give 'hosts' or remove it"),
    ],
)
def test_a_bad_internal_destination_names_its_key(sandbox, problem):
    with pytest.raises(GrantError) as caught:
        parse(sandbox)
    assert "g.toml: sandbox" in str(caught.value) and problem in str(caught.value)


def test_internal_networks_reach_the_calls_spec():
    grant = parse('hosts = ["honcho.tail.example"]\n'
                  'internal = ["100.64.0.0/10", "fd7a:115c:a1e0::/48", "192.168.1.20"]')
    assert grant.internal == ("100.64.0.0/10", "fd7a:115c:a1e0::/48", "192.168.1.20/32")
    fetch = request("http.fetch", '{"url": "http://honcho.tail.example/"}')
    decision = decide(fetch, (grant,), arguments=CallArguments.parse(fetch.arguments), now=NOW,
                      taint=CLEAN, resolved_paths={}, secrets={})
    spec = decision.authorize()
    assert (spec.hosts, spec.internal) == (grant.hosts, grant.internal)


def test_an_argument_host_constraint_matches_an_ip_literal_url():
    grant = parse_grant(FETCH.replace("[sandbox]\n", "") + '[arguments.url]\nhosts = ["fd7a::5"]',
                        "g.toml", home=Path("/home/o"), resolve=lambda p: p)
    fetch = request("http.fetch", '{"url": "http://[FD7A:0::5]:8080/x"}')
    ok = decide(fetch, (grant,), arguments=CallArguments.parse(fetch.arguments), now=NOW,
                taint=CLEAN, resolved_paths={}, secrets={})
    assert ok.record.verdict == "allow"


@pytest.mark.parametrize(
    ("sandbox", "said"),
    [
        ('hosts = ["docs.python.org"]', "network to docs.python.org "
         "(names reach public addresses only)"),
        ('hosts = ["honcho.tail.example"]\ninternal = ["100.64.0.0/10"]',
         "network to honcho.tail.example (names reach public addresses and 100.64.0.0/10 only)"),
        ('hosts = ["10.0.0.5:8080"]', "network to 10.0.0.5:8080 (names reach public addresses "
         "only; IP addresses as listed, internal or not)"),
        ("", "no network"),
    ],
)
def test_grants_check_says_which_addresses_a_grant_reaches(sandbox, said):
    assert said in explain_grant(parse(sandbox))
