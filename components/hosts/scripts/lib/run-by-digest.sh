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
  local target="${BY_DIGEST}/$1.sh" source
  if [[ ! -f "${target}" ]]; then
    source="$(getent passwd "${SUDO_USER:-root}" | cut -d: -f6)/${STEP_BUNDLE}/$1.sh"
    [[ -f "${source}" ]] || {
      echo "[by-digest] FAILED: program $1 is in neither ${BY_DIGEST} nor ${source}:" \
        "the host's copy of its scripts (<host>-scripts) did not reach it" >&2
      exit 2
    }
    # A copy of its own, renamed into place whole: steps on one host install at once.
    install -D -m 0600 "${source}" "${target}.$$" && mv -f "${target}.$$" "${target}"
  fi
  echo "$1  ${target}" | sha256sum --check --status || {
    echo "[by-digest] FAILED: ${target} does not match its digest: changed on this host" >&2
    exit 2
  }
}
