"""The slurm-pool SPANK plugin: build, option parsing in the real sbatch/srun,
the remote context through a stand-in host, AddressSanitizer, valgrind, fuzzing.

sbatch parses options (and runs the plugin's option callbacks) before it
contacts slurmctld, so a slurm.conf naming an unused controller port is all
the client-side tests need: a good value gets as far as "Unable to contact
slurm controller", a bad one stops earlier with the plugin's message.
"""

from __future__ import annotations

import os
import random
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import jinja2
import pytest

ROOT = Path(__file__).resolve().parents[2]
SPANK = ROOT / "spank"
HEADER = Path("/usr/include/slurm/spank.h")
IS_ROOT = os.geteuid() == 0

if not HEADER.exists() or not shutil.which("make") or not (shutil.which("cc") or shutil.which("gcc")):
    pytest.skip("needs make, a C compiler and libslurm-dev (slurm/spank.h)", allow_module_level=True)

SAN_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:abort_on_error=0:exitcode=86",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=86",
}


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SBATCH_", "SALLOC_", "SLURM_", "SPANK_"))}
    env.update(extra)
    return env


def make(out: Path, *targets: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-C", str(SPANK), f"OUT={out}", *targets], capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("spank-build")
    res = make(out, "all", "host")
    assert res.returncode == 0, res.stdout + res.stderr
    return out


@pytest.fixture(scope="module")
def asan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("spank-asan")
    res = make(out, "asan")
    assert res.returncode == 0, res.stdout + res.stderr
    return out / "asan"


def render_plugstack(plugin: Path, required: bool, base_dir: str = "/var/lib/slurm-pool/checkpoints") -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ROOT / "conf_templates")),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    return env.get_template("plugstack.conf.j2").render(
        spank_plugin_path=str(plugin), spank_required=required, checkpoint_base_dir=base_dir
    )


@pytest.fixture(scope="module")
def slurm_conf(build: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A client-only slurm.conf whose plugstack.conf (rendered from the template) loads the plugin."""
    d = tmp_path_factory.mktemp("client-conf")
    (d / "plugstack.conf").write_text(render_plugstack(build / "slurm_pool_spank.so", True, str(d / "ckpt")))
    conf = d / "slurm.conf"
    conf.write_text(
        "ClusterName=spanktest\nSlurmctldHost=localhost\nSlurmctldPort=1\nAuthType=auth/none\nCredType=cred/none\n"
        f"MessageTimeout=1\nPlugStackConfig={d / 'plugstack.conf'}\n"
        "NodeName=n1 CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=n1 Default=YES\n"
    )
    return conf


def client(
    conf: Path, *args: str, prog: str = "sbatch", wrapper: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    cmd = [*wrapper, prog, *args]
    if prog == "sbatch":
        cmd += ["--wrap", "true"]
    else:
        cmd += ["true"]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=clean_env(SLURM_CONF=str(conf)), stdin=subprocess.DEVNULL
    )


# --------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------


def test_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    res = make(tmp_path, "all")
    assert res.returncode == 0, res.stderr
    compiles = [line for line in res.stdout.splitlines() if " -c " in line]
    assert compiles and all("-Wall -Wextra -Werror" in line for line in compiles)
    so = tmp_path / "slurm_pool_spank.so"
    assert so.exists()
    exported = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True).stdout
    for sym in (
        "slurm_spank_init",
        "slurm_spank_init_post_opt",
        "slurm_spank_user_init",
        "plugin_name",
        "plugin_type",
        "plugin_version",
        "spank_plugin_version",
    ):
        assert f" {sym}\n" in exported, sym
    assert "pool_parse_mem" not in exported  # helpers stay private to the plugin


def test_plugstack_template() -> None:
    text = render_plugstack(Path("/opt/pool/slurm_pool_spank.so"), False)
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines == [
        "optional /opt/pool/slurm_pool_spank.so base_dir=/var/lib/slurm-pool/checkpoints signal=USR1 warn_seconds=120"
    ]
    assert render_plugstack(Path("/p.so"), True).splitlines()[-1].startswith("required /p.so ")


def test_plugstack_template_with_spec() -> None:
    from slurm_pool.spec import load_spec

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ROOT / "conf_templates")),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    spec = load_spec(ROOT / "examples" / "pool.yaml")
    text = env.get_template("plugstack.conf.j2").render(spec=spec, spank_plugin_path="/p.so", spank_required=False)
    assert text.splitlines()[-1] == (
        f"optional /p.so base_dir={spec.checkpoint.base_dir} signal={spec.checkpoint.signal} "
        f"warn_seconds={spec.checkpoint.warn_seconds}"
    )


# --------------------------------------------------------------------------
# Real clients
# --------------------------------------------------------------------------

BAD = [
    ("--gpu-mem=bogus", "--gpu-mem: 'bogus' is not a size (use e.g. 10G, 10240M or 10GB)"),
    ("--gpu-mem=0", "--gpu-mem: '0' is not a positive size"),
    ("--gpu-mem=10X", "--gpu-mem: '10X' has an unknown unit (use K, M, G or T, e.g. 10G, 10240M or 10GB)"),
    ("--gpu-mem=10GBs", "has an unknown unit"),
    ("--gpu-mem=17T", "--gpu-mem: '17T' is too large (at most 16T)"),
    ("--gpu-mem=1.5.5G", "has an unknown unit"),
    ("--gpu-mem=-1G", "is not a size"),
    (
        "--checkpoint-signal=KILL",
        "--checkpoint-signal: SIGKILL cannot be caught, so a job cannot checkpoint on it (use e.g. USR1)",
    ),
    ("--checkpoint-signal=SIGSTOP", "SIGSTOP cannot be caught"),
    (
        "--checkpoint-signal=FOO",
        "--checkpoint-signal: 'FOO' is not a signal a job can catch (use e.g. USR1, USR2, TERM, INT or HUP)",
    ),
    ("--checkpoint-signal=9", "is not a signal a job can catch"),
    ("--checkpoint=../up", "--checkpoint: '../up' contains a '.' or '..' component"),
    ("--checkpoint=a/./b", "contains a '.' or '..' component"),
    ("--checkpoint=/", "--checkpoint: '/' names no directory"),
    ("--checkpoint=a\tb", "--checkpoint: 'a?b' contains control characters"),
    ("--checkpoint=" + "d" * 600, "is longer than 512 characters"),
]
GOOD = [
    "--gpu-mem=10G",
    "--gpu-mem=10240M",
    "--gpu-mem=10GB",
    "--gpu-mem=10GiB",
    "--gpu-mem=1.5g",
    "--gpu-mem=512",
    "--checkpoint",
    "--checkpoint=ckpt/run1",
    "--checkpoint=/scratch/me/ck",
    "--checkpoint-signal=SIGUSR2",
    "--checkpoint-signal=usr1",
    "--checkpoint-signal=10",
]


@pytest.mark.parametrize("arg,message", BAD, ids=[b[0][:30] for b in BAD])
def test_sbatch_refuses_bad_values(slurm_conf: Path, arg: str, message: str) -> None:
    res = client(slurm_conf, arg)
    assert res.returncode != 0
    assert "sbatch: error: slurm-pool: " + arg.split("=", 1)[0] + ": " in res.stderr, res.stderr
    assert message in res.stderr, res.stderr
    assert "Invalid --" in res.stderr and "Unable to contact" not in res.stderr


@pytest.mark.parametrize("arg", GOOD)
def test_sbatch_accepts_good_values(slurm_conf: Path, arg: str) -> None:
    res = client(slurm_conf, arg)
    assert "slurm-pool" not in res.stderr, res.stderr
    assert "Unable to contact slurm controller" in res.stderr, res.stderr


@pytest.mark.parametrize("prog", ["srun", "salloc"])
def test_srun_and_salloc_refuse_bad_values(slurm_conf: Path, prog: str) -> None:
    if not shutil.which(prog):
        pytest.skip(f"no {prog}")
    res = client(slurm_conf, "--gpu-mem=lots", prog=prog)
    assert res.returncode != 0
    assert f"{prog}: error: slurm-pool: --gpu-mem: 'lots' is not a size" in res.stderr, res.stderr


def test_options_are_in_help(slurm_conf: Path) -> None:
    res = subprocess.run(
        ["sbatch", "--help"], capture_output=True, text=True, timeout=60, env=clean_env(SLURM_CONF=str(slurm_conf))
    )
    for opt in ("--checkpoint=[DIR]", "--checkpoint-signal=SIG", "--gpu-mem=SIZE"):
        assert opt in res.stdout, opt


def test_fuzzed_values_never_crash_sbatch(slurm_conf: Path) -> None:
    rng = random.Random(7)
    alphabet = "0123456789.GMKTBib/-_=%sn~ \t\n\x01\x7fSIGUSRKILLckpt" + "".join(chr(c) for c in range(0x80, 0x100, 7))
    for i in range(45):
        value = "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 3, 8, 40, 700])))
        opt = ["--gpu-mem", "--checkpoint-signal", "--checkpoint"][i % 3]
        res = client(slurm_conf, f"{opt}={value}")
        assert res.returncode in (0, 1, 255), (opt, value, res.returncode, res.stderr)
        assert "Unable to contact" in res.stderr or "slurm-pool: " + opt in res.stderr, (opt, value, res.stderr)


@pytest.mark.skipif(not shutil.which("valgrind"), reason="no valgrind")
@pytest.mark.parametrize(
    "args", [["--gpu-mem=bogus"], ["--gpu-mem=10G", "--checkpoint=ck", "--checkpoint-signal=USR2", "--signal=USR1"]]
)
def test_valgrind_sbatch(slurm_conf: Path, args: list[str]) -> None:
    res = client(slurm_conf, *args, wrapper=("valgrind", "-q", "--error-exitcode=99"))
    assert res.returncode != 99, res.stderr
    assert "Invalid read" not in res.stderr and "uninitialised" not in res.stderr


# --------------------------------------------------------------------------
# The plugin in each context, through the stand-in host
# --------------------------------------------------------------------------


def host(
    build: Path,
    context: str,
    *args: str,
    env: dict[str, str] | None = None,
    plugin: Path | None = None,
    host_bin: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    cmd = [str(host_bin or build / "pool_host"), str(plugin or build / "slurm_pool_spank.so"), "run", context, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=clean_env(**(env or {})))


def variables(out: str, kind: str) -> dict[str, str]:
    return dict(line.split(" ", 1)[1].split("=", 1) for line in out.splitlines() if line.startswith(kind + " "))


@pytest.mark.parametrize("context", ["allocator", "local"])
def test_client_context_sets_job_control_env(build: Path, context: str) -> None:
    res = host(
        build, context, "--opt", "checkpoint=ck/a", "--opt", "checkpoint-signal=sigusr2", "--opt", "gpu-mem=1.5G"
    )
    assert res.returncode == 0, res.stderr
    assert variables(res.stdout, "control") == {
        "SLURM_POOL_CHECKPOINT": "1",
        "SLURM_POOL_CHECKPOINT_DIR": "ck/a",
        "SLURM_POOL_CHECKPOINT_SIGNAL": "USR2",
        "SLURM_POOL_GPU_MEM_MB": "1536",
    }


def test_client_defaults(build: Path) -> None:
    res = host(build, "allocator", "--arg", "signal=TERM", "--opt", "checkpoint")
    assert variables(res.stdout, "control") == {"SLURM_POOL_CHECKPOINT": "1", "SLURM_POOL_CHECKPOINT_SIGNAL": "TERM"}
    res = host(build, "allocator", "--opt", "checkpoint-signal=HUP")
    assert variables(res.stdout, "control")["SLURM_POOL_CHECKPOINT"] == "1"  # implies --checkpoint
    assert host(build, "allocator").stdout == ""


@pytest.mark.parametrize(
    "extra,env,seen",
    [
        (["--extra", "--signal=B:USR1@60"], {}, True),
        (["--extra", "--sig=USR1"], {}, True),
        (["--extra", "--signal"], {}, True),
        (["--extra", "--si=USR1"], {}, False),
        (["--extra", "--signals=USR1"], {}, False),
        (["--extra", "--", "--extra", "--signal=USR1"], {}, False),
        ([], {"SBATCH_SIGNAL": "USR1@30"}, True),
        ([], {"SLURM_SIGNAL": "USR1"}, True),
        ([], {}, False),
    ],
)
def test_client_notices_signal(build: Path, extra: list[str], env: dict[str, str], seen: bool) -> None:
    res = host(build, "allocator", *extra, env=env)
    assert res.returncode == 0, res.stderr
    assert ("SLURM_POOL_SIGNAL" in variables(res.stdout, "control")) is seen


def test_bad_plugin_arguments_fall_back(build: Path) -> None:
    res = host(
        build,
        "allocator",
        "--arg",
        "base_dir=relative",
        "--arg",
        "signal=KILL",
        "--arg",
        "warn_seconds=x",
        "--arg",
        "colour=blue",
        "--opt",
        "checkpoint",
    )
    assert res.returncode == 0
    assert "plugstack.conf: base_dir='relative': not an absolute path; using the default" in res.stderr
    assert "plugstack.conf: signal: SIGKILL cannot be caught" in res.stderr
    assert "warn_seconds='x': not a number of seconds (0-86400)" in res.stderr
    assert "unknown plugin argument 'colour=blue'" in res.stderr
    assert variables(res.stdout, "control")["SLURM_POOL_CHECKPOINT_SIGNAL"] == "USR1"


def test_refused_option_in_host(build: Path) -> None:
    res = host(build, "allocator", "--opt", "gpu-mem=none")
    assert res.returncode == 2 and "error: slurm-pool: --gpu-mem: 'none' is not a size" in res.stderr


def remote(
    build: Path, base: Path, *args: str, job: int = 77, uid: int = 1000, gid: int = 1000, **kw: object
) -> subprocess.CompletedProcess[str]:
    return host(
        build,
        "remote",
        "--arg",
        f"base_dir={base}",
        "--arg",
        "warn_seconds=45",
        "--uid",
        str(uid),
        "--gid",
        str(gid),
        "--job",
        str(job),
        *args,
        **kw,
    )  # type: ignore[arg-type]


def user_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def test_remote_creates_the_job_directory(build: Path, tmp_path: Path) -> None:
    base = tmp_path / "base"
    uid = 1000 if IS_ROOT else os.getuid()
    gid = 1000 if IS_ROOT else os.getgid()
    res = remote(build, base, "--opt", "checkpoint", "--opt", "gpu-mem=20G", uid=uid, gid=gid)
    assert res.returncode == 0, res.stderr
    target = base / user_name(uid) / "77"
    assert variables(res.stdout, "setenv") == {
        "SLURM_POOL_CHECKPOINT": "1",
        "SLURM_POOL_CHECKPOINT_DIR": str(target),
        "SLURM_POOL_CHECKPOINT_SIGNAL": "USR1",
        "SLURM_POOL_CHECKPOINT_SIGNUM": "10",
        "SLURM_POOL_CHECKPOINT_WARN_SECONDS": "45",
        "SLURM_POOL_GPU_MEM_MB": "20480",
    }
    for d in (target, target.parent):
        st = d.stat()
        assert stat.S_IMODE(st.st_mode) == 0o700 and (st.st_uid, st.st_gid) == (uid, gid)
    assert stat.S_IMODE(base.stat().st_mode) == 0o755
    again = remote(build, base, "--opt", "checkpoint", uid=uid, gid=gid)
    assert again.returncode == 0, again.stderr  # an existing directory is fine


def test_remote_relative_directory(build: Path, tmp_path: Path) -> None:
    uid = os.getuid()
    res = remote(
        build,
        tmp_path / "b",
        "--opt",
        "checkpoint=runs//exp1/",
        "--opt",
        "checkpoint-signal=USR2",
        uid=uid,
        gid=os.getgid(),
    )
    assert res.returncode == 0, res.stderr
    env = variables(res.stdout, "setenv")
    assert env["SLURM_POOL_CHECKPOINT_DIR"] == str(tmp_path / "b" / user_name(uid) / "runs" / "exp1")
    assert (env["SLURM_POOL_CHECKPOINT_SIGNAL"], env["SLURM_POOL_CHECKPOINT_SIGNUM"]) == ("USR2", "12")
    assert Path(env["SLURM_POOL_CHECKPOINT_DIR"]).is_dir()


@pytest.mark.parametrize("given", ["checkpoint=", "checkpoint=(null)", "checkpoint"])
def test_remote_option_without_value(build: Path, tmp_path: Path, given: str) -> None:
    # slurmstepd (and srun inside the job) get a bare --checkpoint as "" or "(null)"
    res = remote(build, tmp_path / "b", "--opt", given, uid=os.getuid(), gid=os.getgid(), job=5)
    assert res.returncode == 0, res.stderr
    assert variables(res.stdout, "setenv")["SLURM_POOL_CHECKPOINT_DIR"] == str(
        tmp_path / "b" / user_name(os.getuid()) / "5"
    )
    res = host(build, "local", "--opt", given)
    assert res.returncode == 0 and "SLURM_POOL_CHECKPOINT_DIR" not in res.stdout


def test_remote_without_checkpoint(build: Path, tmp_path: Path) -> None:
    res = remote(build, tmp_path / "b", "--opt", "gpu-mem=4G")
    assert variables(res.stdout, "setenv") == {"SLURM_POOL_GPU_MEM_MB": "4096"}
    assert not (tmp_path / "b").exists()
    assert remote(build, tmp_path / "b").stdout == ""


@pytest.mark.skipif(not IS_ROOT, reason="needs root to play slurmstepd")
def test_remote_refuses_user_symlinks(build: Path, tmp_path: Path) -> None:
    base, elsewhere = tmp_path / "base", tmp_path / "elsewhere"
    elsewhere.mkdir()
    user = base / user_name(1000)
    user.mkdir(parents=True)
    os.chown(user, 1000, 1000)
    (user / "77").symlink_to(elsewhere)
    os.lchown(user / "77", 1000, 1000)
    res = remote(build, base, "--opt", "checkpoint")
    assert res.returncode == 3
    assert f"{user}/77: '77' is a symbolic link in the user's part of the path; not followed" in res.stderr
    shutil.rmtree(user)
    user.symlink_to(elsewhere)  # even a root-made link is refused in the user's part
    res = remote(build, base, "--opt", "checkpoint")
    assert res.returncode == 3 and "is a symbolic link in the user's part of the path" in res.stderr
    assert list(elsewhere.iterdir()) == []


@pytest.mark.skipif(not IS_ROOT, reason="needs root to play slurmstepd")
def test_remote_refuses_someone_elses_directory(build: Path, tmp_path: Path) -> None:
    user = tmp_path / "base" / user_name(1000)
    user.mkdir(parents=True)
    os.chown(user, 1001, 1001)
    res = remote(build, tmp_path / "base", "--opt", "checkpoint")
    assert res.returncode == 3 and f"'{user.name}' belongs to uid 1001, not to uid 1000" in res.stderr


@pytest.fixture()
def open_tmp() -> Iterator[Path]:
    """A root-owned 0755 directory every user can reach (pytest's tmp_path is private)."""
    path = Path(tempfile.mkdtemp(prefix="slurm-pool-spank-"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.skipif(not IS_ROOT, reason="needs root to play slurmstepd")
def test_remote_absolute_directory_is_made_with_the_users_rights(build: Path, open_tmp: Path) -> None:
    tmp_path = open_tmp
    res = remote(build, tmp_path / "base", "--opt", f"checkpoint={tmp_path}/mine/ck")
    assert res.returncode == 4 and "cannot create 'mine': Permission denied" in res.stderr
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chown(open_dir, 1000, 1000)
    res = remote(build, tmp_path / "base", "--opt", f"checkpoint={open_dir}/ck")
    assert res.returncode == 0, res.stderr
    assert (open_dir / "ck").stat().st_uid == 1000
    # a link the user made is not followed; root's link in root's directory is
    (open_dir / "link").symlink_to(tmp_path)
    os.lchown(open_dir / "link", 1000, 1000)
    res = remote(build, tmp_path / "base", "--opt", f"checkpoint={open_dir}/link/x")
    assert res.returncode == 4 and "'link' is a symbolic link that root does not control; not followed" in res.stderr
    (tmp_path / "rootlink").symlink_to(open_dir)
    res = remote(build, tmp_path / "base", "--opt", f"checkpoint={tmp_path}/rootlink/y")
    assert res.returncode == 0, res.stderr
    assert (open_dir / "y").is_dir()


# --------------------------------------------------------------------------
# AddressSanitizer + UBSan
# --------------------------------------------------------------------------


def test_asan_contexts(asan: Path, tmp_path: Path) -> None:
    runs = [
        (
            "allocator",
            [
                "--opt",
                "checkpoint=a/b",
                "--opt",
                "gpu-mem=2.25G",
                "--opt",
                "checkpoint-signal=10",
                "--extra",
                "--signal=USR1",
            ],
            0,
        ),
        ("local", ["--opt", "gpu-mem=x"], 2),
        (
            "remote",
            [
                "--arg",
                f"base_dir={tmp_path}/b",
                "--uid",
                str(os.getuid()),
                "--gid",
                str(os.getgid()),
                "--opt",
                "checkpoint=deep/er/dir",
                "--opt",
                "gpu-mem=1T",
            ],
            0,
        ),
        ("remote", ["--arg", f"base_dir={tmp_path}/b", "--opt", "checkpoint=/proc/nope/x"], 4),
        ("allocator", ["--arg", "base_dir=" + "x" * 5000, "--arg", "signal=" + "U" * 100, "--opt", "checkpoint"], 0),
    ]
    for context, args, rc in runs:
        res = host(asan, context, *args, env=SAN_ENV, plugin=asan / "slurm_pool_spank.so", host_bin=asan / "pool_host")
        assert "Sanitizer" not in res.stderr and "runtime error" not in res.stderr, res.stderr
        assert res.returncode == rc, (context, args, res.stderr)


def test_asan_fuzz(asan: Path, tmp_path: Path) -> None:
    res = subprocess.run(
        [
            str(asan / "pool_host"),
            str(asan / "slurm_pool_spank.so"),
            "fuzz",
            "20000",
            "20240501",
            str(tmp_path / "base"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(**SAN_ENV),
    )
    assert "Sanitizer" not in res.stderr and "runtime error" not in res.stderr, res.stderr[-4000:]
    assert res.returncode == 0, res.stderr[-4000:]


@pytest.mark.parametrize("given", ["runs/exp1", "runs//exp1/", " spaced ", "a b/c ", "/abs//dir/", "/abs/x"])
def test_the_hooks_resolve_the_directory_as_the_plugin_does(build: Path, tmp_path: Path, given: str) -> None:
    # Issue 11, defect 6: the plugin resolved a relative --checkpoint=DIR for the job but the prolog and
    # epilog got the raw value (and stripped spaces the plugin keeps), so outcome tracking looked elsewhere.
    from slurm_pool.node import jobdir

    uid = os.getuid()
    if given.startswith("/"):
        given = str(tmp_path) + given
    res = remote(build, tmp_path / "b", "--opt", f"checkpoint={given}", uid=uid, gid=os.getgid(), job=91)
    assert res.returncode == 0, res.stderr
    plugin = variables(res.stdout, "setenv")["SLURM_POOL_CHECKPOINT_DIR"]
    env = {
        "SLURM_JOB_ID": "91",
        "SLURM_JOB_USER": user_name(uid),
        "SLURM_JOB_UID": str(uid),
        "SLURM_JOB_GID": str(os.getgid()),
        "SPANK_SLURM_POOL_CHECKPOINT_DIR": given,  # what the prolog and epilog see
    }
    assert jobdir.checkpoint_dir(str(tmp_path / "b"), env) == (plugin, True)
