"""The child process of a conversion (`sandbox`): limits itself, reads the bytes from stdin, writes the
Markdown parts as JSON to stdout. Never run by hand.

Usage: ``python -m ingest_service.documents.conversion.child MEDIA_TYPE LIMITS_JSON < original``
"""

from __future__ import annotations

import json
import resource
import sys


def _limit(limits: dict[str, object]) -> None:
    cpu = int(limits["cpu_seconds"])  # type: ignore[call-overload]
    memory = int(limits["memory_bytes"])  # type: ignore[call-overload]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main() -> int:
    media_type, limits_json = sys.argv[1], sys.argv[2]
    raw_limits = json.loads(limits_json)
    _limit(raw_limits)
    data = sys.stdin.buffer.read()
    # Imported after the limits, so that even the parsers' import runs inside them.
    from ingest_service.documents.conversion.converted import ConversionError
    from ingest_service.documents.conversion.formats import convert
    from ingest_service.documents.conversion.limits import ConversionLimits

    try:
        converted = convert(data, media_type, ConversionLimits(**raw_limits))
        answer: dict[str, object] = {"converted": converted.as_json()}
    except ConversionError as error:
        answer = {"error": str(error)}
    except MemoryError:
        answer = {"error": f"the conversion needed more than {raw_limits['memory_bytes']} bytes of memory"}
    except RecursionError:
        answer = {"error": "the document nests too deeply (a recursion loop)"}
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
