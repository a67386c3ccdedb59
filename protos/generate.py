"""Regenerate the checked-in protobuf and gRPC modules: ``python -m protos.generate``.

The ``.proto`` files live under ``protos/noisyanchor/v1/``; compiling with the repository root as
the include path makes the generated modules import each other as ``protos.noisyanchor.v1.*``,
so they work as an installed package without path hacks.
"""

from __future__ import annotations

import argparse
from pathlib import Path

#: Repository root (the include path) and the proto files, relative to it.
ROOT = Path(__file__).resolve().parent.parent
PROTO_FILES = ("protos/noisyanchor/v1/analyst.proto", "protos/noisyanchor/v1/release.proto")


def generate(out_dir: Path = ROOT) -> list[Path]:
    """Compile every proto into ``out_dir`` (``*_pb2.py`` and ``*_pb2_grpc.py``).

    Returns the generated paths. Needs ``grpcio-tools`` (the ``dev`` extra).
    """
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    include = Path(protoc.__file__).parent / "_proto"
    args = ["protoc", f"-I{ROOT}", f"-I{include}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            *(str(ROOT / name) for name in PROTO_FILES)]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {', '.join(PROTO_FILES)}")
    return sorted(p for name in PROTO_FILES
                  for p in (out_dir / name).parent.glob(Path(name).stem + "_pb2*"))


def main() -> None:
    """Command-line entry: regenerate in place (or into ``--out``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT, help="output root (default: in place)")
    for path in generate(parser.parse_args().out):
        print(path)


if __name__ == "__main__":
    main()
