"""An apt acquire method that serves http(s) URIs from a local directory: `<root>/<host>/<path>`.

Real apt (tests/helpers/real_apt.py) runs with `Dir::Bin::Methods::https` and `::http` pointing
here, so the sources lists keep the real archives' URIs (the hosts the scripts write, which
`Pin: origin <host>` in apt_preferences(5) matches) while nothing leaves the machine. The method
speaks apt's method protocol as apt's own http method does (apt `methods/aptmethod.h`,
`apt-pkg/acquire-method.cc`: "100 Capabilities", then per "600 URI Acquire" a "200 URI Start"
and a "201 URI Done" with the file's hashes, or "400 URI Failure" with an HTTP 404 reason, which
apt treats as a missing file: InRelease absent -> Release + Release.gpg). MIRROR_ROOT names the
directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sys


def send(code: str, fields: list[tuple[str, object]]) -> None:
    sys.stdout.write(code + "\n" + "".join(f"{k}: {v}\n" for k, v in fields) + "\n")
    sys.stdout.flush()


def messages():
    lines: list[str] = []
    for raw in sys.stdin:
        line = raw.rstrip("\n")
        if line:
            lines.append(line)
        elif lines:
            yield lines
            lines = []


def fetch(root: str, fields: dict[str, str]) -> None:
    uri, dest = fields["URI"], fields["Filename"]
    path = os.path.join(root, uri.split("://", 1)[1])
    if not os.path.isfile(path):
        send(
            "400 URI Failure",
            [("URI", uri), ("Message", "404  Not Found"), ("FailReason", "HttpError404")],
        )
        return
    with open(path, "rb") as f:
        data = f.read()
    send("200 URI Start", [("URI", uri), ("Size", len(data))])
    shutil.copyfile(path, dest)
    hashes = [
        (f"{label}-Hash", hashlib.new(name, data).hexdigest())
        for label, name in (("MD5Sum", "md5"), ("SHA1", "sha1"), ("SHA256", "sha256"))
    ]
    send(
        "201 URI Done",
        [("URI", uri), ("Filename", dest), ("Size", len(data)), *hashes],
    )


def main() -> int:
    # apt ends its methods with SIGINT when it is done with them.
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    root = os.environ["MIRROR_ROOT"]
    send("100 Capabilities", [("Version", "1.2"), ("Single-Instance", "true")])
    for message in messages():
        if message[0].startswith("600 "):
            fetch(root, dict(line.split(": ", 1) for line in message[1:] if ": " in line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
