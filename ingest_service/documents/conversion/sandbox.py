"""Runs a converter in a child process under CPU-time, memory and wall-time limits (`child`).

A parser fed hostile bytes (a zip bomb, a PDF whose page tree loops, a million pages) can spin or
allocate without end; in a child with RLIMIT_CPU and RLIMIT_AS it is stopped by the kernel, and the
wall timeout kills it when it waits instead. The service's own process only ever sees JSON. At most
``parallel`` children run at once, so a burst of uploads cannot take all memory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

from ingest_service.documents.conversion.converted import ConversionError
from ingest_service.documents.conversion.converted import Converted
from ingest_service.documents.conversion.limits import ConversionLimits

_PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV", "TESSDATA_PREFIX")


class ConversionSandbox:
    """Converts in child processes (see the module doc).

    Args:
        limits: the bounds of every conversion.
        parallel: children running at once; more callers wait their turn.
    """

    def __init__(self, limits: ConversionLimits, *, parallel: int = 2) -> None:
        self.limits = limits
        self._slots = threading.BoundedSemaphore(max(1, parallel))

    def convert(self, data: bytes, media_type: str) -> Converted:
        """``data`` converted as ``media_type`` in a limited child process.

        Raises:
            ConversionError: unreadable bytes, a limit exceeded (with which), or the child died.
        """
        limits = self.limits
        # Only what the parsers and tesseract need: never the service's database URL or secrets.
        env = {name: os.environ[name] for name in _PASSED_ENV if name in os.environ}
        env.update(OMP_NUM_THREADS="1", OMP_THREAD_LIMIT="1", PYTHONHASHSEED="0")
        command = [sys.executable, "-m", "ingest_service.documents.conversion.child", media_type]
        command.append(json.dumps(limits.as_json()))
        with self._slots:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,  # tesseract and friends are killed with it
            )
            try:
                out, err = process.communicate(data, timeout=limits.wall_seconds)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.communicate()
                raise ConversionError(
                    f"the conversion took longer than the limit of {limits.wall_seconds:g} s"
                ) from None
        if process.returncode in (-signal.SIGXCPU, -signal.SIGKILL) and not out:
            raise ConversionError(
                f"the conversion used more than the limit of {limits.cpu_seconds} s of CPU time"
            )
        try:
            answer = json.loads(out)
        except ValueError:
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit {process.returncode}"]
            if "MemoryError" in tail[0]:
                raise ConversionError(
                    f"the conversion needed more than {limits.memory_bytes} bytes of memory"
                ) from None
            raise ConversionError(f"the converter failed: {tail[0]}"[:500]) from None
        if "error" in answer:
            raise ConversionError(str(answer["error"]))
        return Converted.from_json(answer["converted"])


__all__ = ["ConversionSandbox"]
