"""The driver's record of what it prepared, and the lock that makes it the only writer.

``<plugin dir>/checkpoint.json``, written whole through ``runtimekit.fileio.write_atomically``
(temporary file, fsync, rename, fsync of the folder; mode 0600) before a change is acknowledged::

    {"version": 1, "id": "9c1e4b7a2d3f6e01",
     "claims": {"<claim uid>": {"namespace": "ns", "name": "c", "state": "started" | "completed",
                                "devices": [{"request": "share", "pool": "node-a", "device": "gpu-0",
                                             "position": 0, "kind": "tdm", "share_id": "…",
                                             "slice_id": "s-…", "cdi_ids": ["runtimekit.io/slice=s-…"],
                                             "admin_access": true}]}}}

Two phases, as NVIDIA's driver keeps its claims (kubernetes-sigs/dra-driver-nvidia-gpu
``checkpoint.go``, ``PrepareStarted`` / ``PrepareCompleted``): "started" is written before any side
effect, "completed" with the devices' CDI ids once every one exists. A reader of another version
refuses the file (``CheckpointError``) rather than guess; so does a reader of a file whose fields are
not what this version writes, naming the field and the rule (``claims.<uid>.devices[0].position:
must be an integer, got str '0'``). Optional fields (``share_id``,
``slice_id``, ``admin_access``) are omitted when empty, so adding one never changes old entries.

``id``: 16 random hex digits, made when the file is new (or was written before the key existed) and
written with the first change, so before any slice exists. The driver stamps it on the owner of
every slice it makes (``names.owner_id``): its sweep deletes only slices of its own checkpoint,
never those of a driver with another plugin directory (or hostPath) on the same agent, nor those
made under a checkpoint that was lost. Older readers of version 1 ignore the key.

``DirectoryLock`` holds ``<plugin dir>/driver.lock`` with flock(2) for the life of the process: a
second driver on the same directory is refused at start (``DriverLocked``), and the lock dies with
the process (no stale lock after a SIGKILL). Holding it, the driver removes the temporary files of
writers killed before their rename (``remove_leftovers``); ``load`` does not, for it also serves
readers beside a running driver.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runtimekit.documents import DocumentError, load_json
from runtimekit.fileio import remove_leftovers, write_atomically
from runtimekit.process_lock import LockHeld, hold_lock
from runtimekit.schema import check_type

__all__ = ["VERSION", "Checkpoint", "CheckpointError", "ClaimEntry", "DeviceEntry", "DirectoryLock", "DriverLocked"]

VERSION = 1
#: The largest checkpoint read, in bytes: a claim takes ~300, so room for ~200,000 claims, far past
#: what a node holds, while a file grown without bound is refused, not read into memory.
MAX_CHECKPOINT_BYTES = 64 << 20
STARTED, COMPLETED = "started", "completed"
_ID = re.compile(r"[0-9a-f]{16}")


def new_id() -> str:
    """A checkpoint's id: 16 random hex digits (64 bits: two checkpoints on one agent never share one)."""
    return secrets.token_hex(8)


class CheckpointError(Exception):
    """The checkpoint file cannot be read as this version writes it; the message says why."""


class _Malformed(ValueError):
    """A field of the file that is not what this version writes: ``"<field>: <rule>"``."""


def _field(data: dict[str, Any], where: str, name: str, kind: type, default: Any = None) -> Any:
    """``data[name]``, of type ``kind`` (a bool is no integer), or ``default`` when it is absent and
    one is given; _Malformed naming ``where.name`` and the rule otherwise."""
    if name not in data:
        if default is None:
            raise _Malformed(f"{where}.{name}: required key is missing")
        return default
    check_type(f"{where}.{name}", data[name], (kind,), _Malformed)
    return data[name]


def _items(data: dict[str, Any], where: str, name: str, kind: type) -> list[Any]:
    """The list ``data[name]`` (empty when absent), each item of type ``kind``."""
    items = _field(data, where, name, list, [])
    for index, item in enumerate(items):
        check_type(f"{where}.{name}[{index}]", item, (kind,), _Malformed)
    return items


class DriverLocked(Exception):
    """The plugin directory cannot be locked: another driver process holds its lock, or it cannot be
    made or opened (read-only, not a directory, no permission)."""


@dataclass(frozen=True, slots=True)
class DeviceEntry:
    """One prepared (or being prepared) device of a claim. ``kind``: "tdm", "mig", "gpu" or "nic".
    ``admin_access``: the result had adminAccess, so it holds the device for no one else."""

    request: str
    pool: str
    device: str
    position: int
    kind: str
    share_id: str = ""
    slice_id: str = ""
    cdi_ids: tuple[str, ...] = ()
    admin_access: bool = False

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"request": self.request, "pool": self.pool, "device": self.device,
                                "position": self.position, "kind": self.kind, "cdi_ids": list(self.cdi_ids)}
        if self.share_id:
            data["share_id"] = self.share_id
        if self.slice_id:
            data["slice_id"] = self.slice_id
        if self.admin_access:
            data["admin_access"] = True
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "device") -> DeviceEntry:
        """The entry ``data`` holds (``where``: its place in the file, for errors); ValueError naming
        the field and the rule when a field is missing or of another type."""
        check_type(where, data, (dict,), _Malformed)
        texts = {name: _field(data, where, name, str) for name in ("request", "pool", "device", "kind")}
        return cls(**texts, position=_field(data, where, "position", int),
                   share_id=_field(data, where, "share_id", str, ""), slice_id=_field(data, where, "slice_id", str, ""),
                   cdi_ids=tuple(_items(data, where, "cdi_ids", str)),
                   admin_access=_field(data, where, "admin_access", bool, False))


@dataclass(frozen=True, slots=True)
class ClaimEntry:
    namespace: str
    name: str
    state: str  # STARTED or COMPLETED
    devices: tuple[DeviceEntry, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "state": self.state,
                "devices": [device.to_json() for device in self.devices]}

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "claim") -> ClaimEntry:
        """The entry ``data`` holds (``where``: its place in the file, for errors); ValueError naming
        the field and the rule when a field is missing, of another type or (state) another value."""
        check_type(where, data, (dict,), _Malformed)
        state = _field(data, where, "state", str)
        if state not in (STARTED, COMPLETED):
            raise _Malformed(f"{where}: state must be {STARTED} or {COMPLETED}, got {state!r}")
        devices = _items(data, where, "devices", dict)
        return cls(namespace=_field(data, where, "namespace", str), name=_field(data, where, "name", str), state=state,
                   devices=tuple(DeviceEntry.from_json(device, f"{where}.devices[{i}]") for i, device in enumerate(devices)))


@dataclass
class Checkpoint:
    """The claims the driver prepared, by claim uid; every change is written before it returns.

    Changes come from worker threads (the driver writes off its event loop), so each one holds a
    lock across the change and its write: two at once are written one after the other, and the
    file ends equal to ``claims``. Without it, one thread could write the claims before the other
    thread's change and rename last, so the file would lack a change that memory holds."""

    path: Path
    claims: dict[str, ClaimEntry] = field(default_factory=dict)
    id: str = field(default_factory=new_id)
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False, compare=False)

    @classmethod
    def load(cls, path: str | Path) -> Checkpoint:
        """The checkpoint at ``path`` (empty when there is no file); CheckpointError when it is not
        one this version reads."""
        path = Path(path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls(path)
        except OSError as error:
            raise CheckpointError(f"{path}: cannot read: {error.strerror}") from None
        try:
            data = load_json(raw, what="checkpoint", max_bytes=MAX_CHECKPOINT_BYTES)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            if data.get("version") != VERSION:
                raise CheckpointError(f"{path}: version {data.get('version')!r}, this driver reads version {VERSION} only")
            claims = _claims(data.get("claims", {}))
            checkpoint_id = _checkpoint_id(data)
        except CheckpointError:
            raise
        except _Malformed as error:
            raise CheckpointError(f"{path}: not a DRA driver checkpoint: {error}") from None
        except DocumentError as error:  # not JSON, too big or deep, a huge number, a duplicate key, ...
            raise CheckpointError(f"{path}: not a DRA driver checkpoint: {error.rule}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise CheckpointError(f"{path}: not a DRA driver checkpoint: {type(error).__name__}: {error}") from None
        return cls(path, claims, checkpoint_id)

    def put(self, uid: str, entry: ClaimEntry) -> None:
        """Record ``entry`` for claim ``uid`` and write the file (OSError when it cannot be written:
        the record is then as it was)."""
        with self._lock:
            before = self.claims.get(uid)
            self.claims[uid] = entry
            try:
                self._write()
            except BaseException:
                self._restore(uid, before)
                raise

    def update_device(self, uid: str, device: DeviceEntry) -> None:
        """Replace the device at ``device.position`` of claim ``uid`` and write the file."""
        with self._lock:
            entry = self.claims[uid]
            devices = tuple(device if d.position == device.position else d for d in entry.devices)
            self.put(uid, replace(entry, devices=devices))

    def drop(self, uid: str) -> None:
        """Forget claim ``uid`` (nothing when unknown) and write the file."""
        with self._lock:
            if uid not in self.claims:
                return
            before = self.claims.pop(uid)
            try:
                self._write()
            except BaseException:
                self._restore(uid, before)
                raise

    def remove_leftovers(self) -> list[str]:
        """Remove the temporary files that writers killed before their rename left beside the file
        (``runtimekit.fileio.remove_leftovers``); the names removed. For the driver only, holding
        the plugin directory's lock: no other writer of the file is alive then."""
        return remove_leftovers(self.path)

    def _restore(self, uid: str, entry: ClaimEntry | None) -> None:
        if entry is None:
            self.claims.pop(uid, None)
        else:
            self.claims[uid] = entry

    def _write(self) -> None:
        claims = {uid: entry.to_json() for uid, entry in sorted(self.claims.items())}
        document = {"version": VERSION, "id": self.id, "claims": claims}
        write_atomically(self.path, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode(), mode=0o600)


def _checkpoint_id(data: dict[str, Any]) -> str:
    """The file's ``id``; a new one when the file has none (written before the key existed)."""
    if "id" not in data:
        return new_id()
    check_type("id", data["id"], (str,), _Malformed)
    if not _ID.fullmatch(data["id"]):
        raise _Malformed(f"id: must be 16 lower-case hex digits, got {data['id']!r}")
    return str(data["id"])


def _claims(data: Any) -> dict[str, ClaimEntry]:
    """The ``claims`` mapping of the file: claim uid -> entry."""
    check_type("claims", data, (dict,), _Malformed)
    return {str(uid): ClaimEntry.from_json(entry, f"claims.{uid}") for uid, entry in data.items()}


class DirectoryLock:
    """An exclusive flock(2) on one file, held until ``release`` or the process ends."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock (creating the folder and the file); DriverLocked when another process holds
        it, or when the folder or the file cannot be made or opened (naming the path and why)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = hold_lock(self.path)
        except OSError as error:  # read-only, not a directory, no permission
            raise DriverLocked(f"{error.filename or self.path}: cannot lock the plugin directory: "
                               f"{error.strerror or error}") from None
        except LockHeld as held:
            raise DriverLocked(f"{self.path} is locked: another DRA driver serves this plugin directory "
                               f"(pid {held.holder})") from None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor releases the flock
