"""Hostile spec values of issue 49: coexist paths that make Slurm run the wrong thing (class 5), console trust
settings that let any client name any user (class 6), Kubernetes names the API server refuses (class 7), host
names with path characters and an absurd ``mig plan`` count (class 9).  Each refusal names the path."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from click.testing import CliRunner

from slurm_pool.cli import cli
from slurm_pool.errors import SpecError
from slurm_pool.mig.cli import MAX_GPUS
from slurm_pool.mig.planner import MAX_GPU_INDEX
from slurm_pool.render import Site, SlurmVersion, render_all
from slurm_pool.spec import parse_spec
from slurm_pool.spec.coexist import normal_path, within
from slurm_pool.text import matches
from tests.support.spec_positions import BASE
from tests.unit.test_spec_ranges import put


def refused(doc: dict[str, Any], field: str, *words: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_spec(doc)
    hits = [i for i in exc.value.issues if i.path.startswith(field)]
    assert hits, (field, [str(i) for i in exc.value.issues])
    assert any(all(w in i.message for w in words) for i in hits), [str(i) for i in hits]


def coexist(**kw: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    doc["coexist"] = {
        "job_submit": {"script": "/etc/slurm/site_job_submit.lua"},
        "prolog_dir": "/etc/slurm/prolog.d",
        "epilog_dir": "/etc/slurm/epilog.d",
        "health_check": "/usr/sbin/nhc",
    }
    for key, value in kw.items():
        if key == "script":
            doc["coexist"]["job_submit"]["script"] = value
        else:
            doc["coexist"][key] = value
    return doc


# -- class 5: coexist paths ------------------------------------------------------------------------------------
COEXIST_BAD = [  # fmt: skip
    # settings, the field named, words of the issue
    ({"prolog_dir": "/etc/slurm"}, "coexist.prolog_dir", "'/etc/slurm'", "Prolog=/etc/slurm/*"),
    ({"prolog_dir": "/etc/slurm/"}, "coexist.prolog_dir", "every file"),
    ({"prolog_dir": "//etc//slurm"}, "coexist.prolog_dir", "'//etc//slurm' (/etc/slurm)"),
    ({"epilog_dir": "/usr/local/bin"}, "coexist.epilog_dir", "Epilog=/usr/local/bin/*"),
    ({"prolog_dir": "/"}, "coexist.prolog_dir", "every file"),
    ({"prolog_dir": "/etc"}, "coexist.prolog_dir", "every file"),
    ({"prolog_dir": "/tmp"}, "coexist.prolog_dir", "every file"),
    ({"epilog_dir": "/dev/shm/"}, "coexist.epilog_dir", "every file"),
    ({"script": "/etc/slurm/job_submit.lua"}, "coexist.job_submit.script", "chain itself"),
    ({"script": "/etc/slurm//job_submit.lua"}, "coexist.job_submit.script", "(/etc/slurm/job_submit.lua)"),
    ({"script": "/opt/site/job_submit.lua/"}, "coexist.job_submit.script", "job_submit.lua"),
    ({"script": "/etc/slurm/prolog.d/site.lua"}, "coexist.job_submit.script", "inside prolog_dir"),
    ({"epilog_dir": "/etc/slurm/prolog.d"}, "coexist.epilog_dir", "also the prolog_dir"),
    ({"epilog_dir": "/etc/slurm/prolog.d/"}, "coexist.epilog_dir", "also the prolog_dir"),
    ({"epilog_dir": "/etc/slurm/prolog.d/epilog"}, "coexist.epilog_dir", "inside prolog_dir"),
    ({"prolog_dir": "/etc/slurm/epilog.d/p"}, "coexist.prolog_dir", "inside epilog_dir"),
    ({"health_check": "/etc/slurm/prolog.d/nhc"}, "coexist.health_check", "inside prolog_dir"),
    ({"health_check": "/etc/slurm/epilog.d//x/nhc"}, "coexist.health_check", "inside epilog_dir"),
    ({"health_check": "/usr/local/bin/slurm-pool-healthcheck"}, "coexist.health_check", "run itself"),
    ({"health_check": "/etc/slurm/site_job_submit.lua"}, "coexist.health_check", "also the site's job_submit"),
    ({"prolog_dir": "/var/lib/slurm-pool/checkpoints/p"}, "coexist.prolog_dir", "checkpoint.base_dir", "overlap"),
    ({"epilog_dir": "/var/lib/slurm-pool"}, "coexist.epilog_dir", "every file"),
    ({"epilog_dir": "/var/lib/slurm-pool/checkpoints/"}, "coexist.epilog_dir", "overlap"),
    ({"prolog_dir": "/var/spool/slurm/statesave"}, "coexist.prolog_dir", "console.jwt_key"),
    ({"prolog_dir": "/etc/slurm-pool"}, "coexist.prolog_dir", "every file"),
]


@pytest.mark.parametrize(("settings", "field", "words"), [(c[0], c[1], c[2:]) for c in COEXIST_BAD],
                         ids=[json.dumps(c[0]) for c in COEXIST_BAD])  # fmt: skip
def test_coexist_paths_that_make_slurm_run_the_wrong_thing_are_refused(settings, field: str, words) -> None:
    refused(coexist(**settings), field, *words)


@pytest.mark.parametrize(
    "settings",
    [{}, {"prolog_dir": "/etc/slurm/prolog.d/"}, {"prolog_dir": "/opt/hooks/prolog", "epilog_dir": "/opt/hooks/epilog"},
     {"script": "/etc/slurm/job_submit.site.lua"}, {"health_check": "/usr/local/sbin/nhc"},
     {"prolog_dir": "/etc/slurm/prolog.d2"}],  # a sibling whose name starts alike is not inside
    ids=json.dumps,
)  # fmt: skip
def test_sound_coexist_paths_load(settings) -> None:
    parse_spec(coexist(**settings))


def test_a_hook_the_spec_turns_off_is_not_checked() -> None:
    doc = coexist(prolog_dir="/etc/slurm")
    doc["health"] = {"prolog": False}
    parse_spec(doc)


@pytest.mark.parametrize(
    ("path", "normal"), [("/etc/slurm//x/", "/etc/slurm/x"), ("//", "/"), ("/a", "/a"), ("/a///b//", "/a/b")]
)
def test_normal_path(path: str, normal: str) -> None:
    assert normal_path(path) == normal


def test_within_is_by_component() -> None:
    assert within("/etc/slurm/prolog.d/x", "/etc/slurm/prolog.d") and within("/a", "/a") and within("/a/b", "/")
    assert not within("/etc/slurm/prolog.d2", "/etc/slurm/prolog.d")


# -- class 6: the console's trust settings -----------------------------------------------------------------------
CONSOLE_BAD = [  # fmt: skip
    ("trusted_proxies", ["10.0.0.5/0"], "host bits"),
    ("trusted_proxies", ["0.0.0.0/0"], "name any user"),
    ("trusted_proxies", ["::/0"], "name any user"),
    ("trusted_proxies", ["10.0.0.0/8"], "at most /24"),
    ("trusted_proxies", ["fd00::/48"], "at most /64"),
    ("trusted_proxies", ["10.0.0.5/24"], "host bits"),
    ("trusted_proxies", ["fd00::1/64"], "host bits"),
    ("trusted_proxies", ["0.0.0.0"], "no proxy"),
    ("trusted_proxies", ["::ffff:0.0.0.0/96"], "IPv4 written in IPv6"),  # every IPv4 client of a dual-stack socket
    ("trusted_proxies", ["::ffff:10.0.0.0/104"], "at most /120"),
    ("trusted_proxies", ["64:ff9b::/96"], "IPv4 written in IPv6"),
    ("trusted_proxies", ["224.0.0.1"], "no proxy"),
    ("trusted_proxies", ["10.0.0.300"], "not an IP"),
    *[
        ("user_header", h, "cannot name the user")
        for h in (
            "Host",
            "Authorization",
            "Cookie",
            "Origin",
            "Referer",
            "User-Agent",
            "Accept",
            "Content-Type",
            "Connection",
            "Keep-Alive",
            "Transfer-Encoding",
            "Upgrade",
            "TE",
            "Proxy-Authorization",
            "Forwarded",
            "Via",
            "From",
            "Sec-Fetch-Site",
            "X-Forwarded-For",
            "x-forwarded-host",
            "X-Real-IP",
            "X-CSRF-Token",
            "X-Requested-With",
            "X-HTTP-Method-Override",
            "Remote-Addr",
            "User",
            "X-",
            "X--User",
            "X-User: admin",
        )
    ],
]


@pytest.mark.parametrize(("field", "value", "words"), CONSOLE_BAD, ids=[f"{c[0]}={c[1]}" for c in CONSOLE_BAD])
def test_console_settings_that_let_any_client_name_any_user_are_refused(field: str, value, words: str) -> None:
    refused(put(BASE, ("console", field), value), f"console.{field}", words)


@pytest.mark.parametrize(
    ("field", "value"),
    [("trusted_proxies", ["10.0.0.5", "10.0.0.0/24", "10.0.0.5/32", "fd00::/64", "::1", "::ffff:10.0.0.5",
                         "::ffff:10.0.0.0/120"]),
     ("user_header", "X-Remote-User"), ("user_header", "X-Forwarded-User"), ("user_header", "Remote-User"),
     ("user_header", "x-auth-request-user")],
)  # fmt: skip
def test_sound_console_settings_load(field: str, value) -> None:
    spec = parse_spec(put(BASE, ("console", field), value))
    assert spec.console is not None and getattr(spec.console, field) == value


# -- class 7: Kubernetes names ---------------------------------------------------------------------------------
K8S_BAD = [  # fmt: skip
    (("bridge", "gangs", "priority_classes", 0, "name"), "training..high", "Kubernetes object name"),
    (("bridge", "gangs", "priority_classes", 0, "name"), "system-training", "system-"),
    (("bridge", "gangs", "priority_classes", 0, "name"), "system-node-critical", "system-"),
    (("bridge", "gangs", "priority_classes", 0, "name"), "training.-high", "Kubernetes object name"),
    (("bridge", "gangs", "priority_classes", 0, "name"), "training-.high", "Kubernetes object name"),
    (("bridge", "gangs", "priority_classes", 0, "name"), ".training", "Kubernetes object name"),
    (("bridge", "gangs", "priority_classes", 0, "name"), "a" * 254, "Kubernetes object name"),
    (("bridge", "gangs", "scheduler_name"), "volcano..x", "Kubernetes object name"),
    (("bridge", "lease_name"), "lease..x", "Kubernetes object name"),
    (("bridge", "lease_name"), "Lease", "Kubernetes object name"),
    (("bridge", "lease_namespace"), "a.b", "DNS label"),  # a namespace is a label: no dots
    (("bridge", "kserve_namespace"), "a" * 64, "DNS label"),
    (("bridge", "gangs", "namespaces", 0), "-training", "DNS label"),
    (("bridge", "gpu_resource"), "nvidia..com/gpu", "resource name"),
    (("bridge", "gpu_resource"), "nvidia.-com/gpu", "resource name"),
]


@pytest.mark.parametrize(("path", "value", "words"), K8S_BAD, ids=[f"{'.'.join(map(str, c[0]))}={c[1][:20]}"
                                                                   for c in K8S_BAD])  # fmt: skip
def test_kubernetes_names_the_api_server_refuses_are_refused(path, value: str, words: str) -> None:
    field = ".".join(str(p) for p in path if not isinstance(p, int))
    refused(put(BASE, path, value), field.split(".priority_classes")[0], words)


@pytest.mark.parametrize(
    ("path", "value"),
    [(("bridge", "gangs", "priority_classes", 0, "name"), "training.high"),
     (("bridge", "gangs", "priority_classes", 0, "name"), "systems-x"),
     (("bridge", "gangs", "priority_classes", 0, "name"), "a" * 253),
     (("bridge", "lease_name"), "a." + "b" * 100),  # a subdomain's labels are not capped at 63 (apimachinery)
     (("bridge", "gpu_resource"), "example.org/gpu")],
)  # fmt: skip
def test_sound_kubernetes_names_load(path, value: str) -> None:
    parse_spec(put(BASE, path, value))


@pytest.mark.parametrize(
    ("name", "ok"),
    [("a", True), ("a-b.c", True), ("0", True), ("a..b", False), ("a.-b", False), ("a-", False), ("-a", False),
     ("a.", False), ("A", False), ("a_b", False), ("a\n", False), ("a" * 253, True), ("a" * 254, False)],
)  # fmt: skip
def test_the_subdomain_rule_is_apimachinerys(name: str, ok: bool) -> None:
    assert matches("k8s-name", name) is ok


# -- class 9: host names and mig plan counts --------------------------------------------------------------------
HOSTS_BAD = ["a/b", "gpu[1-2]/../etc", "../etc", "-gpu1", ".gpu1", "gpu1,/tmp/x", "x[1-2]/y"]


@pytest.mark.parametrize("hosts", HOSTS_BAD)
def test_host_names_with_path_characters_are_refused(hosts: str) -> None:
    refused(put(BASE, ("node_groups", 0, "hosts"), hosts), "node_groups[0].hosts", "not a node name")


@pytest.mark.parametrize("entry", HOSTS_BAD)
def test_partition_host_lists_with_path_characters_are_refused(entry: str) -> None:
    refused(put(BASE, ("partitions", 0, "nodes"), [entry]), "partitions[0].nodes[0]", "not a node name")


def test_a_stepped_host_range_still_renders() -> None:
    doc = put(BASE, ("node_groups", 0, "hosts"), "a-gpu[1-5/2]")
    files = render_all(parse_spec({k: v for k, v in doc.items() if k != "coexist"}), Site(), SlurmVersion(26, 5))
    assert "a-gpu[1,3,5]" in files["slurm.conf"] or "a-gpu1" in files["slurm.conf"]
    assert "/" not in "".join(line.split("File=")[0] for line in files["gres.conf"].splitlines())


@pytest.mark.parametrize(
    ("gpus", "code"), [("1", 0), (str(MAX_GPUS), 0), (str(MAX_GPUS + 1), 2), ("100000", 2), ("10" * 30, 2)]
)
def test_mig_plan_gpus_are_bounded_by_one_node(gpus: str, code: int) -> None:
    res = CliRunner().invoke(cli, ["mig", "plan", "--model", "A100-40GB", "--gpus", gpus, "--demand", "1g.5gb=1"])
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output


def test_mig_plan_bound_is_a_plan_files_bound() -> None:
    assert MAX_GPUS == MAX_GPU_INDEX
