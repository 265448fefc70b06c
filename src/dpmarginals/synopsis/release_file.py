"""A synopsis file as it is saved and read: its fields checked one by one, and a digest of
its content recorded at save so that an edit is detected on load (issue #33).

:meth:`~dpmarginals.synopsis.base.Synopsis.save` writes ``"digest": "sha256:<hex>"``, the
SHA-256 of the canonical JSON of everything else in the file
(``json.dumps(body, sort_keys=True, separators=(",", ":"))``); :func:`load_synopsis`
(and so ``query``, ``synthesize``, ``estimate``'s readers) recomputes it and refuses a file
whose content no longer matches, in one line.  A digest is not a signature: whoever edits
the file can also recompute it, so it catches an edited cell, epsilon or hash, not a forger
(sign the file, e.g. with ``minisign`` or ``gpg``, to authenticate it).  A file without a
digest (written by an older dpmarginals, or with the digest removed) is read, but its
privacy mark no longer says private: nothing tells whether it was altered.

Every field the package reads is checked on load, whatever the digest says (a digest can be
recomputed over nonsense): the format and its version, the kind and the method, the privacy
mark (model, epsilon, delta, plan hash), the domain, and for a views synopsis every view
(attributes of the domain, as many finite cells in [0, 1] as its table has, summing to 1)
and the recorded collection (``info.groups``, ``info.n``) that standard errors read.  Each
refusal is one line naming the field and its value, e.g.
``r.json: views[3].values[17] = -5.0: a released cell must be in [0, 1]``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.errors import DPMarginalsError, describe_os_error

__all__ = ["DIGEST_FIELD", "FileFieldError", "check_digest", "check_privacy", "check_views",
           "content_digest", "field_error", "sealed"]

#: The top-level field holding the digest.
DIGEST_FIELD = "digest"
#: Versions of the synopsis file format this package reads.
VERSIONS = (1,)
#: Privacy models a mark may name ("unknown": a synopsis saved without a release path).
MODELS = ("local", "central", "unknown")
#: How far a released cell may stray outside [0, 1], and a view's total from 1, by rounding.
TOLERANCE = 1e-6
_HEX64 = re.compile(r"[0-9a-f]{64}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


class FileFieldError(DPMarginalsError):
    """A field of a synopsis file that this package cannot trust (one line)."""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def field_error(source: str, field: str, value: Any, why: str) -> FileFieldError:
    """``SOURCE: FIELD = VALUE: WHY``, the one line of every refusal."""
    return FileFieldError(f"{source}: {field} = {_show(value)}: {why}")


def _canonical(body: Mapping[str, Any]) -> bytes:
    return json.dumps({k: v for k, v in body.items() if k != DIGEST_FIELD}, sort_keys=True,
                      separators=(",", ":")).encode()


def content_digest(body: Mapping[str, Any]) -> str:
    """``"sha256:<hex>"`` of the canonical JSON of ``body`` without its digest field.

    >>> content_digest({"a": 1, "b": [1.5, "x"]}) == content_digest({"b": [1.5, "x"], "a": 1})
    True
    """
    return "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()


def sealed(body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` as it will be read back from JSON (lists, string keys), with its digest."""
    parsed = json.loads(json.dumps(body))
    parsed[DIGEST_FIELD] = content_digest(parsed)
    return parsed


def save_sealed(body: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Write ``body`` :func:`sealed` as JSON to ``path``: the one writer of release files
    (a synopsis, a central result), an OS error as one line naming the file and why."""
    try:
        Path(path).write_text(json.dumps(sealed(body)))
    except OSError as exc:
        raise DPMarginalsError(f"cannot write {str(path)!r}: "
                               f"{describe_os_error(exc, path)}") from None


def check_digest(body: Mapping[str, Any], source: str) -> bool:
    """True when ``body`` carries a digest that matches its content, False when it carries
    none; a digest that does not match (or is malformed) is refused."""
    if DIGEST_FIELD not in body:
        return False
    recorded = body[DIGEST_FIELD]
    if not isinstance(recorded, str) or not _DIGEST.fullmatch(recorded):
        raise field_error(source, DIGEST_FIELD, recorded,
                          "a digest is 'sha256:' and 64 lowercase hex digits")
    actual = content_digest(body)
    if actual != recorded:
        raise FileFieldError(
            f"{source} was altered after it was saved: the SHA-256 of its content is "
            f"{actual[7:23]}..., the digest recorded at save ({DIGEST_FIELD}) is "
            f"{recorded[7:23]}...; a release must not be edited: use the file as it was "
            "published, or release again")
    return True


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_header(body: Mapping[str, Any], source: str, kinds: Sequence[str],
                 methods: Sequence[str]) -> None:
    """The fields every synopsis file has: ``version``, ``kind``, ``method``."""
    version = body.get("version")
    if version not in VERSIONS or isinstance(version, bool):
        raise field_error(source, "version", version, "this dpmarginals reads synopsis files "
                          f"of version {', '.join(map(str, VERSIONS))}")
    kind = body.get("kind")
    if kind not in kinds:
        raise field_error(source, "kind", kind, f"known kinds: {', '.join(sorted(kinds))}")
    method = body.get("method")
    if not isinstance(method, str) or _key(method) not in methods:
        raise field_error(source, "method", method,
                          f"not a dpmarginals method (known: {', '.join(sorted(methods))})")


def _key(method: str) -> str:
    return method.lower().replace("-", "_")


def check_privacy(body: Mapping[str, Any], source: str) -> None:
    """The privacy mark's fields (a missing mark, or ``private`` anything but a JSON
    ``true``, is read as not private, as before: not an error)."""
    mark = body.get("privacy")
    if mark is None:
        return
    if not isinstance(mark, Mapping):
        raise field_error(source, "privacy", mark, "the privacy mark is a JSON object")
    model = mark.get("model", "unknown")
    if model not in MODELS:
        raise field_error(source, "privacy.model", model, f"one of {', '.join(MODELS)}")
    method = mark.get("method")
    if method is not None and (not isinstance(method, str) or (
            _key(method) != _key(str(body.get("method"))) and method != "unknown")):
        raise field_error(source, "privacy.method", method,
                          f"differs from the file's method {body.get('method')!r}")
    epsilon = mark.get("epsilon")
    if epsilon is None:
        if mark.get("private") is True:
            raise field_error(source, "privacy.epsilon", epsilon,
                              "a private release states its epsilon")
    elif not (_number(epsilon) and math.isfinite(epsilon) and epsilon > 0):
        raise field_error(source, "privacy.epsilon", epsilon, "a finite number > 0")
    delta = mark.get("delta", 0.0)
    if not (_number(delta) and 0 <= delta < 1):
        raise field_error(source, "privacy.delta", delta, "a number in [0, 1)")
    plan_hash = mark.get("plan_hash")
    if plan_hash is not None and not (isinstance(plan_hash, str)
                                      and _HEX64.fullmatch(plan_hash)):
        raise field_error(source, "privacy.plan_hash", plan_hash,
                          "a plan hash is 64 lowercase hex digits (SHA-256)")
    for name in ("package_version", "unit", "randomness", "reason"):
        if mark.get(name) is not None and not isinstance(mark[name], str):
            raise field_error(source, f"privacy.{name}", mark[name], "a string")


def check_views(body: Mapping[str, Any], domain: Any, source: str,
                oracles: Sequence[str]) -> None:
    """A views synopsis: every view over distinct attributes of the domain, with one
    finite cell in [0, 1] per cell of its table (C order), summing to 1; and the recorded
    collection that standard errors and intervals read."""
    views = body.get("views")
    if not isinstance(views, list) or not views:
        raise field_error(source, "views", views, "a views synopsis holds a non-empty list "
                          "of {attributes, values}")
    info = body.get("info", {})
    if not isinstance(info, Mapping):
        raise field_error(source, "info", info, "a JSON object")
    slack = TOLERANCE
    if info.get("consistent") is False and _number(info.get("min_cell")):
        slack = max(slack, -float(info["min_cell"]) + TOLERANCE)  # unconverged: as recorded
    for i, view in enumerate(views):
        where = f"views[{i}]"
        if not isinstance(view, Mapping):
            raise field_error(source, where, view, "a view is {attributes, values}")
        cells = _attributes(view.get("attributes"), domain, source, f"{where}.attributes")
        values = view.get("values")
        if not isinstance(values, list):
            raise field_error(source, f"{where}.values", values, "a list of cells")
        if len(values) != cells:
            raise field_error(source, f"{where}.values", f"{len(values):,} cells",
                              f"the table over {view['attributes']} has {cells:,}")
        total = 0.0
        for j, x in enumerate(values):
            if not (_number(x) and math.isfinite(x)):
                raise field_error(source, f"{where}.values[{j}]", x, "a finite number")
            if not -slack <= x <= 1 + TOLERANCE:
                raise field_error(source, f"{where}.values[{j}]", x,
                                  "a released cell must be in [0, 1]")
            total += x
        if abs(total - 1) > max(TOLERANCE, slack * cells):
            raise field_error(source, f"the sum of {where}.values", round(total, 9),
                              "a released table's cells sum to 1")
    _check_collection(info, domain, source, oracles)


def _attributes(attrs: Any, domain: Any, source: str, where: str) -> int:
    if (not isinstance(attrs, list) or not attrs
            or not all(isinstance(a, str) for a in attrs)):
        raise field_error(source, where, attrs, "a non-empty list of attribute names")
    unknown = [a for a in attrs if a not in domain.attributes]
    if unknown:
        raise field_error(source, where, attrs, f"{unknown[0]!r} is not in the domain")
    if len(set(attrs)) != len(attrs):
        raise field_error(source, where, attrs, "an attribute appears twice")
    return math.prod(domain.size(a) for a in attrs)


def _check_collection(info: Mapping[str, Any], domain: Any, source: str,
                      oracles: Sequence[str]) -> None:
    """``info.n`` and ``info.groups`` (attributes, oracle, epsilon, users; the raw
    ``estimate`` of each group, when recorded, one finite number per cell)."""
    if "n" in info and not (_number(info["n"]) and math.isfinite(info["n"])
                            and info["n"] >= 0):
        raise field_error(source, "info.n", info["n"], "a number of users >= 0")
    groups = info.get("groups")
    if groups is None:
        return
    if not isinstance(groups, list):
        raise field_error(source, "info.groups", groups, "a list of groups")
    for i, g in enumerate(groups):
        where = f"info.groups[{i}]"
        if not isinstance(g, Mapping):
            raise field_error(source, where, g, "a group is {attributes, oracle, epsilon, "
                              "users}")
        cells = _attributes(g.get("attributes"), domain, source, f"{where}.attributes")
        if g.get("oracle") not in oracles:
            raise field_error(source, f"{where}.oracle", g.get("oracle"),
                              f"one of {', '.join(oracles)}")
        eps = g.get("epsilon")
        if not (_number(eps) and math.isfinite(eps) and eps > 0):
            raise field_error(source, f"{where}.epsilon", eps, "a finite number > 0")
        users = g.get("users")
        if not (isinstance(users, int) and not isinstance(users, bool) and users >= 0):
            raise field_error(source, f"{where}.users", users, "an integer >= 0")
        estimate = g.get("estimate")
        if estimate is not None:
            if not isinstance(estimate, list) or len(estimate) != cells:
                raise field_error(source, f"{where}.estimate", _show(estimate),
                                  f"one number per cell ({cells:,})")
            bad = next((j for j, x in enumerate(estimate)
                        if not (_number(x) and math.isfinite(x))), None)
            if bad is not None:
                raise field_error(source, f"{where}.estimate[{bad}]", estimate[bad],
                                  "a finite number")
