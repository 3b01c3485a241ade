"""The SFTP subsystem of a lab host (tests/helpers/lab.py): Debian's sftp-server, unless the
host's state file `sftp.stall-after-bytes` holds N: then the client's first N bytes reach the
server and nothing more, so a copy stops halfway (some files written, others not) and stays
there until the client goes away: a first contact caught mid-copy when `pulumi up` is killed.

Usage (sshd_config): Subsystem sftp <python> lab_sftp.py /usr/lib/openssh/sftp-server
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path


def main() -> None:
    server = sys.argv[1]
    flag = Path(os.environ.get("STUB_STATE", "/nonexistent")) / "sftp.stall-after-bytes"
    if not flag.is_file():
        os.execv(server, [server])
    budget = int(flag.read_text())
    child = subprocess.Popen([server], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    client_in, client_out = sys.stdin.fileno(), sys.stdout.fileno()
    server_in, server_out = child.stdin.fileno(), child.stdout.fileno()
    client_open = True
    while client_open or budget > 0:
        watch = [server_out] + ([client_in] if client_open else [])
        ready, _, _ = select.select(watch, [], [])
        if client_in in ready:
            data = os.read(client_in, 65536)
            if not data:
                client_open = False
                if budget > 0:
                    child.stdin.close()
                else:
                    return  # the client hung up on a stalled copy
            elif budget > 0:
                os.write(server_in, data[:budget])
                budget -= len(data)
            # Once the budget is spent the client's requests go nowhere: no answer ever comes.
        if server_out in ready:
            data = os.read(server_out, 65536)
            if not data:
                return
            os.write(client_out, data)


if __name__ == "__main__":
    main()
