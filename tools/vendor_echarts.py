"""Refresh the chart library the explore page inlines (``make vendor``).

Downloads Apache ECharts' npm tarball from the npm registry at the pinned version, refuses it
unless its sha512 matches the registry's published ``dist.integrity`` recorded below, and
writes ``dist/echarts.min.js`` with the package's licence files and ``VENDOR.json`` (version,
tarball, integrity, the file's sha256) into ``src/tempora_sim/exploration/assets/vendor/``. The
tests check the committed file against ``VENDOR.json``, so the page is built offline from a
fresh clone. To move to another version: ``python tools/vendor_echarts.py --version X
--integrity sha512-…`` (the integrity as ``npm view echarts@X dist.integrity`` prints it).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import sys
import tarfile
import urllib.request
from pathlib import Path

PACKAGE = "echarts"
VERSION = "6.1.0"
INTEGRITY = "sha512-q0yaFPggC9FUdsWH4blavRWFmxdrIodbkoKNAjJudAI6CA9gNPxHtV2RcZNEepZVlk4yvBYkOkbk6HIVpIyHZA=="
REGISTRY = "https://registry.npmjs.org"
FILES = {"package/dist/echarts.min.js": "echarts.min.js", "package/LICENSE": "LICENSE", "package/NOTICE": "NOTICE"}
OPTIONAL = {"package/licenses/LICENSE-d3": "LICENSE-d3"}
DEST = Path(__file__).resolve().parent.parent / "src" / "tempora_sim" / "exploration" / "assets" / "vendor"


def check_integrity(data: bytes, integrity: str) -> None:
    algo, _, want = integrity.partition("-")
    if algo != "sha512":
        raise SystemExit(f"vendor: unsupported integrity algorithm {algo!r} (expected sha512)")
    got = base64.b64encode(hashlib.sha512(data).digest()).decode("ascii")
    if got != want:
        raise SystemExit(f"vendor: {PACKAGE} tarball integrity mismatch: got sha512-{got}, expected {integrity}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default=VERSION)
    ap.add_argument("--integrity", default=INTEGRITY)
    ap.add_argument("--registry", default=REGISTRY)
    ap.add_argument("--dest", type=Path, default=DEST)
    args = ap.parse_args(argv)
    url = f"{args.registry.rstrip('/')}/{PACKAGE}/-/{PACKAGE}-{args.version}.tgz"
    with urllib.request.urlopen(url, timeout=60) as resp:  # noqa: S310 - the npm registry, pinned above
        data = resp.read()
    check_integrity(data, args.integrity)
    args.dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = set(tar.getnames())
        for member, name in {**FILES, **{k: v for k, v in OPTIONAL.items() if k in names}}.items():
            fh = tar.extractfile(member)
            if fh is None:
                raise SystemExit(f"vendor: {member} missing from {url}")
            (args.dest / name).write_bytes(fh.read())
    js = (args.dest / "echarts.min.js").read_bytes()
    record = {
        "package": PACKAGE,
        "version": args.version,
        "licence": "Apache-2.0",
        "tarball": url,
        "integrity": args.integrity,
        "file": "echarts.min.js",
        "sha256": hashlib.sha256(js).hexdigest(),
        "bytes": len(js),
    }
    (args.dest / "VENDOR.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(f"vendored {PACKAGE} {args.version} ({len(js):,} bytes) into {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
