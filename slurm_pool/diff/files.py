"""What a new render would change in the installed files: a pure comparison.

:func:`compare_files` takes the rendered files (rendered twice, for the
default :class:`~slurm_pool.render.site.Site` and for a probe site with every
value changed, so that what depends on the site is known), the installed
texts (None: not there) and the node settings (node.conf) both ways, and
returns one :class:`~slurm_pool.diff.conf.Difference` per change:

* job_submit.lua -- its policy data (``SLURM_POOL``) is read back, never run,
  and each changed rule is named in words: ``tier shared: policy.checkpoint
  add_requeue -> reject``; a different code part is one line;
* node.conf -- each setting the hooks read: ``node.conf: warn_seconds 120 -> 60``
  (the machine's own ``state_dir``, ``gpus`` and ``scontrol`` are not compared);
* every other file, line by line: a line is known by its key (its first word,
  ``Key=`` cut, or the whole first word for ``NodeName=``/``PartitionName=``
  lines) and compared word by word, leaving out the words and keys that differ
  between the two renders (the site's paths, ports, hosts): ``file
  site-settings.conf: Prolog /etc/slurm/prolog.d/* -> -``.

A file that is not installed is ``file NAME: not installed``, except the ones
installed elsewhere or not at all (:data:`OPTIONAL`).  ``manifest.json`` (the
others' digests) and ``accounting.json`` (compared with slurmdbd itself) are
left out.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Collection, Iterable, Iterator, Mapping

from ClusterShell.NodeSet import NodeSet, NodeSetException

from slurm_pool.diff.conf import CONF_FILES, Difference
from slurm_pool.policy.luaread import read_policy

#: Files not compared: digests of the others, and the accounting plan (compared with slurmdbd).
SKIPPED = frozenset({"manifest.json", "accounting.json"})
#: Files compared only where installed: merged into slurm.conf, or installed outside Slurm's directory.
OPTIONAL = frozenset({"site-settings.conf", "jupyterhub_config.py", "k8s-bridge-rbac.yaml", "k8s-priorityclasses.yaml"})
#: node.conf keys that are the machine's own (``nodeconf.render``'s arguments), not the spec's.
NODE_LOCAL_KEYS = frozenset({"state_dir", "gpus", "scontrol"})
#: Line keys that name an object: the whole first word is the key.
IDENTITY_KEYS = frozenset({"NodeName", "PartitionName", "NodeSet", "Name"})
#: Files Slurm reads as slurm.conf: their settings, nodes and partitions are also compared with the cluster.
SLURM_CONF_FILES = frozenset(CONF_FILES)
NOT_INSTALLED = "not installed"
NOT_POOLS = "not slurm-pool's"
#: The policy tables whose entries are named objects: table -> the kind a line names.
POLICY_KINDS = {"tiers": "tier", "partitions": "partition", "projects": "project", "gpu_types": "gpu type"}


# -- conf-like files, line by line ------------------------------------------------------------------


def _key(line: str) -> str:
    first = line.split()[0]
    name, sep, _ = first.partition("=")
    return first if sep and name in IDENTITY_KEYS else name


def _key_name(key: str) -> str:
    return key.partition("=")[0]


def _lines(text: str) -> dict[str, list[list[str]]]:
    """Key -> the words of each line with that key, comments and blank lines left out."""
    out: dict[str, list[list[str]]] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if line:
            out.setdefault(_key(line), []).append(line.split())
    return out


def _rest(words: list[str] | None, key: str) -> str:
    """A line as shown: without its key (``Key=`` cut from the first word)."""
    if words is None:
        return ""
    first = words[0]
    head = "" if first == key else first[len(key) + 1 :] if first.startswith(key + "=") else first
    return " ".join(w for w in [head, *words[1:]] if w)


def _text_differences(
    name: str, want: str, probe: str, have: str, written: Collection[str] | None = None
) -> Iterator[Difference]:
    a, b, got = _lines(want), _lines(probe), _lines(have)
    site = {k for k in a.keys() | b.keys() if len(a.get(k, [])) != len(b.get(k, []))}
    for key in [*a, *(k for k in got if k not in a)]:
        if key in site or (key not in a and written is not None and _key_name(key) not in written):
            continue
        mine, theirs = a.get(key, []), got.get(key, [])
        for i in range(max(len(mine), len(theirs))):
            w = mine[i] if i < len(mine) else None
            h = theirs[i] if i < len(theirs) else None
            if w is not None and h is not None:
                if _same_words(w, b[key][i], h):
                    continue
                w = _with_site_words(w, b[key][i], h)
            yield Difference("file", name, key, _rest(h, key), _rest(w, key))


def _with_site_words(want: list[str], probe: list[str], have: list[str]) -> list[str]:
    """The rendered words, with the installed site's own where the renders differ (shown as it would be)."""
    if not len(want) == len(probe) == len(have):
        return want
    return [h if w != p else w for w, p, h in zip(want, probe, have, strict=True)]


def _same_words(want: list[str], probe: list[str], have: list[str]) -> bool:
    """Equal but for the words the site decides (those that differ between the two renders)."""
    if len(want) != len(probe):  # the site adds words: compare those both renders share
        return [w for w in want if w in probe] == [h for h in have if h in probe]
    if len(want) != len(have):
        return False
    return all(w == h or w != p for w, p, h in zip(want, probe, have, strict=True))


# -- job_submit.lua: the policy in words ---------------------------------------------------------------


def shown_value(value: Any) -> str:
    """A policy value as text: ``-`` for nil, a set's names, a list comma-joined, else compact JSON."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, str)):
        return str(value)
    if isinstance(value, dict) and value and all(v is True for v in value.values()):
        return ",".join(sorted(str(k) for k in value))
    if isinstance(value, list) and all(isinstance(v, (int, str)) for v in value):
        return ",".join(str(v) for v in value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _flat(value: Any, path: str) -> dict[str, Any]:
    """Nested mappings as ``path.key`` -> value; a set (every value true), a list or a scalar is a leaf."""
    if isinstance(value, dict) and value and not all(v is True for v in value.values()):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{path}.{k}"))
        return out
    return {path: value}


def policy_differences(installed: Mapping[str, Any], rendered: Mapping[str, Any]) -> Iterator[Difference]:
    """Each changed policy rule: ``tier shared: policy.checkpoint add_requeue -> reject``."""
    for table in [*rendered, *(t for t in installed if t not in rendered)]:
        have, want = installed.get(table), rendered.get(table)
        kind = POLICY_KINDS.get(table) or ("user" if table == "user_project" else "")
        if kind and isinstance(have or {}, dict) and isinstance(want or {}, dict):
            h, w = have or {}, want or {}
            for obj in [*w, *(o for o in h if o not in w)]:
                if obj not in h or obj not in w:
                    yield Difference(kind, str(obj), "policy added" if obj in w else "policy removed", "", "")
                    continue
                yield from _leaf_differences(kind, str(obj), "policy", h[obj], w[obj])
        else:
            yield from _leaf_differences("policy", "", str(table), have, want)


def _leaf_differences(kind: str, name: str, path: str, have: Any, want: Any) -> Iterator[Difference]:
    fh, fw = _flat(have, path), _flat(want, path)
    for leaf in [*fw, *(k for k in fh if k not in fw)]:
        if fh.get(leaf) != fw.get(leaf):
            yield Difference(kind, name, leaf, shown_value(fh.get(leaf)), shown_value(fw.get(leaf)))


def _job_submit(want: str, have: str) -> Iterator[Difference]:
    mine, theirs = read_policy(want), read_policy(have)
    if theirs is None:
        yield Difference("file", "job_submit.lua", NOT_POOLS, "", "")
        return
    if mine is None:  # never: the render writes the data
        raise ValueError("the rendered job_submit.lua holds no policy data")
    yield from policy_differences(theirs[0], mine[0])
    if mine[1] != theirs[1]:
        digest = lambda t: hashlib.sha256(t.encode()).hexdigest()[:12]  # noqa: E731
        yield Difference("file", "job_submit.lua", "code", digest(theirs[1]), digest(mine[1]))


# -- node.conf ---------------------------------------------------------------------------------------


def node_differences(installed: Mapping[str, str] | None, rendered: Mapping[str, str]) -> Iterator[Difference]:
    """Each node.conf setting (defaults filled in on both sides) the render changes; the machine's own left out."""
    if installed is None:
        yield Difference("file", "node.conf", NOT_INSTALLED, "", "")
        return
    for key in [*rendered, *(k for k in installed if k not in rendered)]:
        if key in NODE_LOCAL_KEYS:
            continue
        if installed.get(key, "") != rendered.get(key, ""):
            yield Difference("node.conf", "", key, installed.get(key, "") or "-", rendered.get(key, "") or "-")


# -- all files ---------------------------------------------------------------------------------------


def compare_files(
    rendered: Mapping[str, str],
    probe: Mapping[str, str],
    installed: Mapping[str, str | None],
    node_rendered: Mapping[str, str] | None = None,
    node_installed: Mapping[str, str] | None = None,
    written: Mapping[str, Collection[str]] | None = None,
) -> list[Difference]:
    """Every difference between the rendered files and the installed ones, in the render's order.

    ``installed`` maps each rendered file's name to its installed text (None: not
    there); ``node_rendered``/``node_installed`` are node.conf's settings with
    the defaults filled in (``node_rendered`` None: node.conf not compared).
    ``written`` names, per file, every key its template can write: a line of
    another key there is the site's own (slurm.conf's extra lines), not shown.
    """
    out: list[Difference] = []
    for name, text in rendered.items():
        if name in SKIPPED:
            continue
        have = installed.get(name)
        if have is None:
            if name not in OPTIONAL:
                out.append(Difference("file", name, NOT_INSTALLED, "", ""))
            continue
        if name == "job_submit.lua":
            out.extend(_job_submit(text, have))
        else:
            keys = (written or {}).get(name)
            out.extend(_text_differences(name, text, probe.get(name, text), have, keys))
    if node_rendered is not None:
        out.extend(node_differences(node_installed, node_rendered))
    return out


def _nodes(text: str) -> NodeSet:
    try:
        return NodeSet(text)
    except NodeSetException:
        return NodeSet()


def not_seen(files: Iterable[Difference], cluster: Iterable[Difference]) -> list[Difference]:
    """``files`` without the slurm.conf lines whose change the running cluster already shows (each change once).

    A setting the cluster reports differently, a partition it reports a field of, a node line
    whose nodes it reports: the cluster's line says it; the file's would repeat it.
    """
    seen = list(cluster)
    keys = {d.field for d in seen if d.kind == "config"}
    parts = {d.name for d in seen if d.kind == "partition"}
    nodes = NodeSet.fromlist([d.name for d in seen if d.kind == "node"]) if seen else NodeSet()
    out = []
    for d in files:
        if d.kind == "file" and d.name in SLURM_CONF_FILES:
            name, _, value = d.field.partition("=")
            if (
                d.field in keys
                or (name == "PartitionName" and value in parts)
                or (name == "NodeName" and len(_nodes(value) & nodes) > 0)
            ):
                continue
        out.append(d)
    return out


def compared_names(rendered: Iterable[str]) -> list[str]:
    """The rendered files :func:`compare_files` reads from the installed directory."""
    return [n for n in rendered if n not in SKIPPED]
