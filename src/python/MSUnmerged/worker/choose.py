"""Which deleters may serve a site's stage-out command or a storage.json volume's PFN scheme, in order, and which
of them this host can use.

The tables name every deleter: the base ones (deleters.py) and the WebDAV one (webdav.py, which builds on them),
so they live above both.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Tuple, Type

from .deleters import Deleter, Gfal2Deleter, GfalRmDeleter, PosixDeleter, XrootdDeleter
from .webdav import WebDavDeleter

_GFAL: List[Type[Deleter]] = [WebDavDeleter, Gfal2Deleter, GfalRmDeleter]
_XROOTD: List[Type[Deleter]] = [Gfal2Deleter, GfalRmDeleter, XrootdDeleter]

# Stage-out command (site-local-config) -> deleters to try, in order: the first usable one that accepts the method's
# PFNs. WMCore's other copy commands delete with the tool of their protocol: SRM (srmcp, lcg-cp) through gfal2,
# FNAL's xrdcp wrapper through xrdfs. WebDAV PFNs go to the worker's own client (worker/webdav.py), whose DELETE is
# conditional and never recursive; gfal2's http plugin (davix) is not used for them.
COMMANDS: Dict[str, List[Type[Deleter]]] = {
    "gfal2": _GFAL, "srmv2": _GFAL, "srmv2-lcg": _GFAL, "xrdcp": [XrootdDeleter],
    "stageout-xrdcp-fnal": [XrootdDeleter], "cp": [PosixDeleter], "posix": [PosixDeleter]}
# The protocol of a storage.json volume's PFN (pfn.scheme) -> deleters to try, when the job deletes through the
# volume Rucio names rather than a stage-out method (pfn.RUCIO_VOLUME).
SCHEMES: Dict[str, List[Type[Deleter]]] = {
    "https": [WebDavDeleter], "http": [WebDavDeleter], "root": _XROOTD, "roots": _XROOTD}


def _usable(kinds: List[Type[Deleter]], timeout: float, env: Mapping[str, str]) -> Tuple[List[Deleter], str]:
    found, reasons = [], []
    for kind in kinds:
        deleter = kind(timeout, env)
        why = deleter.problem()
        if why is None:
            found.append(deleter)
        else:
            reasons.append(why)
    return found, "; ".join(reasons)


def for_command(command: str, timeout: float, env: Mapping[str, str]) -> Tuple[List[Deleter], str]:
    """(the usable deleters of a known stage-out command, in order, and why the others are not) -- no deleter
    and the reason for an unknown command or one whose tools are all missing."""
    kinds = COMMANDS.get(command)
    if kinds is None:
        return [], "unknown stage-out command %r (known: %s)" % (command, ", ".join(sorted(COMMANDS)))
    return _usable(kinds, timeout, env)


def for_scheme(scheme: str, timeout: float, env: Mapping[str, str]) -> Tuple[List[Deleter], str]:
    """Like for_command, for a storage.json protocol's PFN scheme (pfn.scheme)."""
    kinds = SCHEMES.get(scheme)
    if kinds is None:
        return [], "no deleter for %s PFNs (known: %s)" % (scheme, ", ".join(sorted(SCHEMES)))
    return _usable(kinds, timeout, env)
