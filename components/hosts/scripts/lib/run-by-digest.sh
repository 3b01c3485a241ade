# shellcheck shell=bash
# run-by-digest.sh: the head of every step's stdin (components/hosts/remote.py step_program), so
# it is kept short: every step carries it.
#
# A host's scripts arrive once, by SFTP as the login user, in ~/.gpu-cluster/<role>/ as
# <sha256>.sh (components/hosts/bundle.py). `by_digest <sha256>` copies one into a root-owned
# directory and checks it against its digest before anything runs, so a step, or a delete hook
# long after it, runs the very program it was made with, never whatever sits at a path now.
# The step then sources it from there.
#
# Inputs (set by the step's stdin before this file):
#   STEP_BUNDLE  the role's directory under the login user's home, e.g. .gpu-cluster/node
BY_DIGEST=/var/lib/gpu-cluster/scripts

by_digest() {
  local target="${BY_DIGEST}/$1.sh" source staged="${BY_DIGEST}/$1.sh.$$"
  if [[ -f "${target}" ]] && echo "$1  ${target}" | sha256sum --check --status; then
    return 0
  fi
  source="$(getent passwd "${SUDO_USER:-root}" | cut -d: -f6)/${STEP_BUNDLE}/$1.sh"
  [[ -f "${source}" ]] || {
    echo "[by-digest] FAILED: program $1 is in neither ${BY_DIGEST} nor ${source}:" \
      "the host's copy of its scripts (<host>-scripts) did not reach it" >&2
    exit 2
  }
  # Checked as copied, then renamed into place whole (steps on one host install at once): a
  # program that does not match its digest never lands where a step runs it.
  install -D -m 0600 "${source}" "${staged}"
  echo "$1  ${staged}" | sha256sum --check --status || {
    rm -f "${staged}"
    echo "[by-digest] FAILED: ${source} does not match its digest: changed on this host since" \
      "it arrived; copy the scripts again: pulumi up --replace the URN of <host>-scripts" >&2
    exit 2
  }
  mv -f "${staged}" "${target}"
}
