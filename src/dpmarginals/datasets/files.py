"""Where data files live, how they are found, and how they are fetched when missing.

The data directory ("data home") resolves, in order, from

1. the ``data_home`` argument,
2. the environment variable ``DPMARGINALS_DATA``,
3. the user cache: ``$XDG_CACHE_HOME/dpmarginals``, else ``~/.cache/dpmarginals``.

A file is looked up by its relative path (the layout of the project's shared data
folder, e.g. ``adult-raw/adult.data.gz``) in the argument alone when one is given,
otherwise in ``$DPMARGINALS_DATA`` (when set) and then in the user cache.

A missing file is downloaded from its public source(s) when downloads are allowed (the
``download`` argument, and the environment variable ``DPMARGINALS_OFFLINE`` unset or
``0``): :func:`fetch` has `pooch <https://www.fatiando.org/pooch>`_ stream the URL
(through :mod:`urllib`, with a timeout) to a temporary file beside the target, applies
the file's conversion (e.g. gzip a plain ``.dat``), and renames it into place, so an
interrupted download never leaves a partial file.  The target directory is the first
searched directory, or the user cache when that one is not writable.  Failing that,
:class:`~dpmarginals.core.errors.DataNotFoundError` says which file was looked for, where,
and where to put it.

**Pinned hashes.**  Every registered file carries the SHA-256 of its *content*
(:func:`content_sha256`: the decompressed bytes of a ``.gz``, the named member of a
``.zip`` when ``member`` is set, else the bytes), taken from the project's shared copies,
each checked against the upstream file at the commit its registry entry names.

* A download whose bytes are the content (a plain copy, or a plain file stored gzipped)
  is checked by pooch before it is converted; any other (e.g. kosarak's byte prefix of
  the full FIMI file) is checked after conversion.  Either way a changed or truncated
  download is refused, naming the file and the expected and actual hashes.
* A file found locally is checked too (a copy a user placed must not be silently
  wrong), once per process and (path, size, modification time): hashing all of the
  registered files takes about 0.15 s, so no marker is kept on disk.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import DataNotFoundError, DPMarginalsError
from ..core.extras import lazy

pooch = lazy("pooch", extra="datasets", what="downloading a data set")

__all__ = [
    "ENV_DATA",
    "ENV_OFFLINE",
    "RemoteFile",
    "cache_dir",
    "content_sha256",
    "data_home",
    "download_allowed",
    "ensure_file",
    "fetch",
    "find_file",
    "search_dirs",
    "verify_file",
]

ENV_DATA = "DPMARGINALS_DATA"
ENV_OFFLINE = "DPMARGINALS_OFFLINE"
DEFAULT_TIMEOUT = 60.0
_CHUNK = 1 << 20

#: ``(source_path, target_path) -> None``: turn the downloaded file into the stored one.
Converter = Callable[[Path, Path], None]


# -- conversions of a downloaded file into the stored layout ----------------------------
def copy(src: Path, dst: Path) -> None:
    """Store the download as is."""
    shutil.copyfile(src, dst)


def gzip_file(src: Path, dst: Path) -> None:
    """Store a plain download gzip-compressed (``foo.dat`` -> ``foo.dat.gz``)."""
    with open(src, "rb") as fin, gzip.GzipFile(dst, "wb", mtime=0) as fout:
        shutil.copyfileobj(fin, fout, _CHUNK)


def gunzip_into_zip(member: str) -> Converter:
    """Store a ``.gz`` download as a ``.zip`` holding ``member`` (UCI MSNBC layout)."""

    def convert(src: Path, dst: Path) -> None:
        with (
            gzip.open(src, "rb") as fin,
            zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zf,
            zf.open(member, "w") as fout,
        ):
            shutil.copyfileobj(fin, fout, _CHUNK)

    return convert


def first_bytes_gzip(count: int) -> Converter:
    """Keep the first ``count`` bytes of a (possibly gzipped) download, gzipped."""

    def convert(src: Path, dst: Path) -> None:
        with open(src, "rb") as probe:
            gzipped = probe.read(2) == b"\x1f\x8b"
        opener: Any = gzip.open if gzipped else open
        with opener(src, "rb") as fin, gzip.GzipFile(dst, "wb", mtime=0) as fout:
            left = count
            while left > 0 and (chunk := fin.read(min(_CHUNK, left))):
                fout.write(chunk)
                left -= len(chunk)

    return convert


@dataclass(frozen=True)
class RemoteFile:
    """A file of a data set: its relative path under the data home and its sources.

    ``urls`` are tried in order (the original public home first, then mirrors); each is
    paired with the conversion that turns what it serves into the stored file.
    ``sha256`` is the pinned SHA-256 of the stored file's content (:func:`content_sha256`;
    None: not checked), ``member`` the member of a ``.zip`` whose bytes are that content.
    """

    path: str
    urls: tuple[tuple[str, Converter], ...] = field(default=())
    sha256: str | None = None
    member: str | None = None

    def __post_init__(self) -> None:
        if Path(self.path).is_absolute() or ".." in Path(self.path).parts:
            raise DPMarginalsError(f"data file path must be relative: {self.path!r}")

    def download_sha256(self, convert: Converter) -> str | None:
        """The SHA-256 of what a source with conversion ``convert`` serves, when it is the
        content (a plain copy, or a plain file stored gzipped); else None."""
        if convert is gzip_file or (convert is copy and self.member is None
                                    and not self.path.endswith(".gz")):
            return self.sha256
        return None


# -- directories ------------------------------------------------------------------------
def cache_dir() -> Path:
    """The user cache: ``$XDG_CACHE_HOME/dpmarginals`` or ``~/.cache/dpmarginals``."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "dpmarginals"


def data_home(data_home: str | os.PathLike[str] | None = None) -> Path:
    """The primary data directory: the argument, else ``$DPMARGINALS_DATA``, else the cache.

    >>> str(data_home("/tmp/somewhere"))
    '/tmp/somewhere'
    """
    if data_home is not None:
        return Path(data_home).expanduser()
    env = os.environ.get(ENV_DATA)
    if env:
        return Path(env).expanduser()
    return cache_dir()


def search_dirs(data_home: str | os.PathLike[str] | None = None) -> list[Path]:
    """Directories searched for data files, in order (see the module docstring)."""
    if data_home is not None:
        return [Path(data_home).expanduser()]
    dirs = []
    env = os.environ.get(ENV_DATA)
    if env:
        dirs.append(Path(env).expanduser())
    cache = cache_dir()
    if cache not in dirs:
        dirs.append(cache)
    return dirs


def download_allowed(download: bool | None = None) -> bool:
    """``download`` if given, else True unless ``$DPMARGINALS_OFFLINE`` is set (not "0")."""
    if download is not None:
        return bool(download)
    return os.environ.get(ENV_OFFLINE, "0").strip().lower() in ("", "0", "false", "no")


def find_file(relpath: str, data_home: str | os.PathLike[str] | None = None) -> Path | None:
    """The first existing ``<dir>/<relpath>`` over :func:`search_dirs`, or None."""
    for d in search_dirs(data_home):
        candidate = d / relpath
        if candidate.is_file():
            return candidate
    return None


# -- content hashes ---------------------------------------------------------------------
def content_sha256(path: str | os.PathLike[str], member: str | None = None) -> str:
    """SHA-256 of a data file's content: the decompressed bytes of a ``.gz``, the bytes of
    ``member`` of a ``.zip`` when given, else the file's bytes (a damaged file raises)."""
    path = Path(path)
    digest = hashlib.sha256()
    try:
        if member is not None:
            with zipfile.ZipFile(path) as zf, zf.open(member) as fh:
                _update(digest, fh)
        elif path.name.endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                _update(digest, fh)
        else:
            with open(path, "rb") as fh:
                _update(digest, fh)
    except (OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise DPMarginalsError(f"data file {str(path)!r} is damaged or truncated: "
                               f"{exc}") from None
    return digest.hexdigest()


def _update(digest: Any, fh: Any) -> None:
    while chunk := fh.read(_CHUNK):
        digest.update(chunk)


def _check_content(path: Path, file: RemoteFile, origin: str) -> None:
    """Raise unless ``path`` holds ``file``'s pinned content (naming both hashes)."""
    if file.sha256 is None:
        return
    actual = content_sha256(path, file.member)
    if actual != file.sha256:
        raise DPMarginalsError(
            f"{origin}: SHA-256 of its content is {actual}, expected {file.sha256} (a "
            f"changed, truncated or different copy of {file.path})")


#: (resolved path, size, mtime_ns) -> content SHA-256 of the files checked in this process.
_VERIFIED: dict[tuple[str, int, int], str] = {}


def _stat_key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns


def verify_file(file: RemoteFile, path: str | os.PathLike[str]) -> Path:
    """``path`` if it holds ``file``'s pinned content (checked once per process, path, size
    and modification time); else a one-line error naming both hashes."""
    path = Path(path)
    if file.sha256 is None or _VERIFIED.get(_stat_key(path)) == file.sha256:
        return path
    source = f"; replace it with the file from {file.urls[0][0]}" if file.urls else ""
    _check_content(path, file, f"data file {str(path)!r} is not the expected one{source}")
    _VERIFIED[_stat_key(path)] = file.sha256
    return path


# -- download ---------------------------------------------------------------------------
def _urlopen(url: str, timeout: float) -> Any:
    """The opener :func:`fetch` uses (tests replace it; nothing else touches the network)."""
    request = urllib.request.Request(url, headers={"User-Agent": "dpmarginals"})
    return urllib.request.urlopen(request, timeout=timeout)


def _downloader(open_url: Callable[[str, float], Any], timeout: float) -> Any:
    """A pooch downloader streaming ``url`` with ``open_url`` (urllib: http(s), file)."""

    def download(url: str, output_file: Any, _pooch: Any, check_only: bool = False) -> None:
        try:
            with open_url(url, timeout) as response:
                status = getattr(response, "status", None)
                if status is not None and not 200 <= int(status) < 300:
                    raise DataNotFoundError(f"cannot download {url}: HTTP status {status}")
                with open(output_file, "wb") as out:
                    shutil.copyfileobj(response, out, _CHUNK)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            if isinstance(exc, DataNotFoundError):
                raise
            reason = getattr(exc, "reason", None) or exc
            raise DataNotFoundError(f"cannot download {url}: {reason}") from None
        if Path(output_file).stat().st_size == 0:
            raise DataNotFoundError(f"cannot download {url}: empty response")

    return download


def fetch(
    url: str,
    dest: str | os.PathLike[str],
    *,
    convert: Converter = copy,
    timeout: float = DEFAULT_TIMEOUT,
    opener: Callable[[str, float], Any] | None = None,
    file: RemoteFile | None = None,
) -> Path:
    """Download ``url`` to ``dest`` atomically (temporary file + rename); return ``dest``.

    ``convert`` turns the downloaded bytes into the stored file (default: as is).
    ``opener(url, timeout)`` returns a readable response (default :mod:`urllib`, which
    also serves ``file://`` URLs).  ``file``: the registry entry whose pinned hash the
    download (pooch, when it is the content) or else the converted file must match.
    Raises :class:`DataNotFoundError` on any failure, leaving no partial file behind.
    """
    dest = Path(dest)
    known = file.download_sha256(convert) if file is not None else None
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent)
    logger = pooch.get_logger()
    level = logger.level
    logger.setLevel("WARNING")  # no "Downloading ..." chatter: errors are one line
    try:
        name = Path(urllib.parse.urlsplit(url).path).name or "download"
        try:
            raw = Path(pooch.retrieve(url, known_hash=known, fname=name, path=tmp_dir,
                                      downloader=_downloader(opener or _urlopen, timeout)))
        except DataNotFoundError:
            raise
        except ValueError as exc:  # pooch: the download is not the pinned file
            reason = str(exc).split(". Deleted")[0]
            raise DataNotFoundError(f"{url} is not the expected {dest.name}: {reason}") from None
        converted = Path(tmp_dir) / "converted" / dest.name  # the name says if it is .gz
        converted.parent.mkdir()
        try:
            convert(raw, converted)
        except (OSError, EOFError, zipfile.BadZipFile) as exc:
            raise DataNotFoundError(f"downloaded {url} but cannot convert it: {exc}") from None
        if file is not None and known is None:
            try:
                _check_content(converted, file, f"{url} (stored as {file.path})")
            except DPMarginalsError as exc:
                raise DataNotFoundError(str(exc)) from None
        os.replace(converted, dest)
    finally:
        logger.setLevel(level)
        shutil.rmtree(tmp_dir, ignore_errors=True)
    if file is not None and file.sha256 is not None:
        _VERIFIED[_stat_key(dest)] = file.sha256
    return dest


def _writable_target(relpath: str, dirs: Sequence[Path]) -> Path:
    """Where a download goes: the first searched directory if writable, else the cache."""
    for d in [dirs[0], cache_dir()]:
        try:
            d.mkdir(parents=True, exist_ok=True)
            if os.access(d, os.W_OK):
                return d / relpath
        except OSError:
            continue
    return dirs[0] / relpath


def ensure_file(
    file: RemoteFile,
    data_home: str | os.PathLike[str] | None = None,
    *,
    dataset: str = "",
    download: bool | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Path:
    """The local path of ``file``: found in the search directories or downloaded.

    Raises :class:`DataNotFoundError` (one line) naming the file, the directories
    searched and where to put it when it is neither present nor downloadable, and
    :class:`DPMarginalsError` when the local file is not the pinned one
    (:func:`verify_file`).
    """
    found = find_file(file.path, data_home)
    if found is not None:
        return verify_file(file, found)
    dirs = search_dirs(data_home)
    failures: list[str] = []
    if download_allowed(download) and file.urls:
        target = _writable_target(file.path, dirs)
        for url, convert in file.urls:
            try:
                return fetch(url, target, convert=convert, timeout=timeout, file=file)
            except DataNotFoundError as exc:
                failures.append(str(exc))
    where = ", ".join(str(d) for d in dirs)
    label = f"data set {dataset!r}: " if dataset else ""
    source = ""
    if file.urls:
        url, convert = file.urls[0]
        converted = ("" if convert is copy else
                     f", which is not {file.path} itself: dpmarginals converts it when it "
                     "downloads it")
        source = f" (public source: {url}{converted})"
    if failures:
        tail = f"; download failed: {' | '.join(failures)}"
    elif file.urls and not download_allowed(download):
        tail = f"; downloads are disabled (download=False or ${ENV_OFFLINE})"
    else:
        tail = ""
    message = (
        f"{label}file {file.path!r} not found in {where}; put it at "
        f"{dirs[0] / file.path}{source} or set ${ENV_DATA} to a directory holding "
        f"{file.path}{tail}"
    )
    raise DataNotFoundError(message.replace("\r", " ").replace("\n", " "))
