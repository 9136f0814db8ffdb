"""Generates realistic CMS unmerged dumps, protected lists and scan stats (demo and benchmarks)."""
from __future__ import annotations

import gzip
import json
import random
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator

from MSUnmerged.sources.offline import PROTECTED_FILE, STATS_FILE

ERAS = ["Run3Summer23DRPremix", "Run3Summer22EEMiniAODv4", "RunIISummer20UL18RECO", "Run2024F",
        "Run2023D", "Phase2Spring24DIGIRECOMiniAOD", "HINPbPbSpring23Reco"]
PRIMARIES = ["TTtoLNu2Q_TuneCP5_13p6TeV_powheg-pythia8", "DYto2L-4Jets_MLL-50_TuneCP5_13p6TeV_madgraphMLM-pythia8",
             "QCD_PT-15to7000_TuneCP5_Flat_13p6TeV_pythia8", "Muon0", "JetMET1", "EGamma1", "ZeroBias",
             "GluGluHToGG_M-125_TuneCP5_13p6TeV_powheg-pythia8", "HIPhysicsRawPrime3"]
TIERS = ["AODSIM", "MINIAODSIM", "NANOAODSIM", "GEN-SIM-RAW", "AOD", "MINIAOD", "RAW-RECO", "FEVTDEBUGHLT"]
LOG_AREAS = ["/store/unmerged/logs/prod/2024/11/WMAgent", "/store/unmerged/data/logs/prod/2024/10/12"]


@dataclass
class SampleSpec:
    """Shape of a generated RSE dump."""

    files: int = 100_000
    files_per_block: int = 250
    blocks_per_dataset: int = 8
    protected_fraction: float = 0.3  # of datasets, protected at the dataset level or run-number deep
    log_fraction: float = 0.02
    seed: int = 12345


@dataclass
class Sample:
    protected: list[str]
    dataset_bases: list[str]


def _dataset(rng: random.Random, i: int) -> str:
    era = rng.choice(ERAS)
    data = not era.startswith(("Run3Summer", "RunIISummer", "Phase2"))
    tier = rng.choice(TIERS[4:] if data else TIERS[:4])
    proc = f"{rng.choice(['124X_mcRun3_2022_realistic_v12', 'PromptReco', '140X_dataRun3_v4', 'Pilot'])}-v{1 + i % 3}"
    return f"/store/unmerged/{era}/{rng.choice(PRIMARIES)}/{tier}/{proc}{i}"


def iter_lfns(spec: SampleSpec, sample: Sample) -> Iterator[str]:
    """LFNs grouped by directory, as a ConMon scanner lists them."""
    rng = random.Random(spec.seed + 1)
    n = 0
    while n < spec.files:
        base = sample.dataset_bases[(n // (spec.files_per_block * spec.blocks_per_dataset)) % len(sample.dataset_bases)]
        block_no = (n // spec.files_per_block) % spec.blocks_per_dataset
        if base.endswith("0") and "Run20" in base:  # data: run-number levels /000/123/456
            directory = f"{base}/000/{380 + block_no:03d}/{rng.randrange(1000):03d}"
        else:
            directory = f"{base}/{block_no * 10000:05d}"
        if rng.random() < spec.log_fraction:
            directory = f"{rng.choice(LOG_AREAS)}/{block_no:04d}"
        for _ in range(min(spec.files_per_block, spec.files - n)):
            yield f"{directory}/{str(uuid.UUID(int=rng.getrandbits(128))).upper()}.root"
            n += 1


def make_sample(spec: SampleSpec) -> Sample:
    rng = random.Random(spec.seed)
    n_datasets = max(1, spec.files // (spec.files_per_block * spec.blocks_per_dataset))
    bases = [_dataset(rng, i) for i in range(n_datasets)]
    protected = []
    for base in bases:
        if rng.random() < spec.protected_fraction:
            if base.endswith("0") and "Run20" in base:
                protected.append(f"{base}/000/{380 + rng.randrange(spec.blocks_per_dataset):03d}")  # run-number deep
            else:
                protected.append(base + rng.choice(["", "/"]))  # some served with a trailing slash
    return Sample(protected=protected or [bases[0]], dataset_bases=bases)


def write_dump(spec: SampleSpec, sample: Sample, path: Path, compress: bool = False) -> int:
    """Write the dump (gzip when `compress`); returns the number of lines."""
    opener = gzip.open if compress else open
    n = 0
    with opener(path, "wb") as fh:  # type: ignore[operator]
        out: BinaryIO = fh
        batch: list[str] = []
        for lfn in iter_lfns(spec, sample):
            batch.append(lfn)
            if len(batch) >= 50_000:
                out.write(("\n".join(batch) + "\n").encode())
                n += len(batch)
                batch = []
        if batch:
            out.write(("\n".join(batch) + "\n").encode())
            n += len(batch)
    return n


def stats_for(rse: str, files: int, end_time: float | None = None, start_time: float | None = None) -> dict:
    """A ConMon `stats` answer for one RSE whose scan just finished (by default it took ten minutes; workers
    refuse files changed after its start, so a scan of files made just now must start after them)."""
    end = time.time() if end_time is None else end_time
    return {rse: {"scanner": {"type": "xrootd", "version": "1.3"}, "server": "localhost:1094",
                  "server_root": "/store/", "start_time": end - 600 if start_time is None else start_time,
                  "end_time": end, "status": "done",
                  "error": None, "root_failed": False, "failed_subdirectories": [], "files": files,
                  "directories": files // 100, "empty_directories": 0}}


def write_sample_inputs(directory: Path, rse: str, spec: SampleSpec, compress: bool = False) -> dict[str, Path]:
    """Dump, protected list (WMStats answer) and stats files for one generated RSE (the last two named as
    OfflineSources reads them)."""
    directory.mkdir(parents=True, exist_ok=True)
    sample = make_sample(spec)
    dump = directory / ("dump.gz" if compress else "dump.txt")
    n = write_dump(spec, sample, dump, compress)
    protected = directory / PROTECTED_FILE
    protected.write_text(json.dumps({"result": sample.protected}))
    stats = directory / STATS_FILE
    stats.write_text(json.dumps(stats_for(rse, n)))
    return {"dump": dump, "protected": protected, "stats": stats}
