#!/usr/bin/env bash
# wait-ready.sh: the host is ready for the bootstrap steps that follow.
#
# Inputs (optional, but for the two keys' ones, which come together):
#   CLOUD_INIT_TIMEOUT_SECONDS  bound on `cloud-init status --wait` (default 900)
#   APT_LOCK_TIMEOUT_SECONDS    how long apt waits for the dpkg lock (default 600)
#   APT_DAILY_TIMEOUT_SECONDS   how long to wait for first-boot apt-daily runs (default 900)
#   APT_DAILY_POLL_SECONDS      how often to look (default 5)
#   APT_LISTS_RETRIES           attempts of apt-get update while the lists lock is held
#                               (default 8, with the backoff of lib/common.sh)
#   KERNEL_WITH_DRIVER  true on GPU nodes: from this step on unattended-upgrades installs no
#                    kernel or NVIDIA package and the kernel metapackages are held, so no
#                    kernel arrives before the driver step (default false)
#   SSH_USER         the login user whose ~/.ssh/authorized_keys is written (required with
#                    AUTHORIZED_KEYS: both or neither)
#   AUTHORIZED_KEYS  OpenSSH public key lines, one per line (required with SSH_USER):
#                    ssh.publicKey and the key the steps log in with (derived from
#                    sshPrivateKey), so this session never locks itself out; once both are the
#                    new key, the old one is gone
#   ROOT_VOLUME_GIB  the root volume's size (rootVolumeGiB): the root partition and filesystem
#                    grow to the disk once it has that size (unset: not grown here; cloud-init
#                    grows them at first boot)
#   ROOT_GROW_TIMEOUT_SECONDS   how long to wait for the disk to show that size (default 600)
#   SSHD_MAX_STARTUPS  a managed control plane only: sshd's MaxStartups (start:rate:full), the
#                    SSH connections of its fleet's steps it takes at once
#   OS_VERSION       the Ubuntu release the host must run, 22.04 or 24.04 (optional: an existing
#                    host's pool names it, and its packages are pinned for it)
#
# Checks: cloud-init finished; the OS is Ubuntu 22.04 or 24.04; the first-boot apt-daily and
# apt-daily-upgrade (unattended-upgrades) runs are over; the package lists are fresh. Then the
# login user's authorized_keys holds exactly the stack's keys, so a rotated ssh.publicKey reaches
# running machines without replacing them, and a root volume grown in place (EBS ModifyVolume)
# is grown into: cloud-init's growpart runs at boot only. On a managed control plane, sshd
# takes its fleet's fan-in (a drop-in with MaxStartups, checked with `sshd -t`, reloaded only
# when it changed).
set -Eeuo pipefail

if ! declare -F init_script >/dev/null; then
  # shellcheck source-path=SCRIPTDIR source=lib/common.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
fi

SUPPORTED_UBUNTU="22.04 24.04"
KEY_RE='^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com) [A-Za-z0-9+/=]+( .*)?$'
HOME_DIR=""
# sshd uses the first value it reads for a keyword, and Ubuntu's sshd_config includes
# sshd_config.d/*.conf at its top in name order: 10- comes before cloud-init's 50- and 60-.
SSHD_DROP_IN=/etc/ssh/sshd_config.d/10-gpu-cluster-fan-in.conf

# Checked before anything is touched: MaxStartups as sshd reads it; both key inputs or neither,
# each line one public key.
check_inputs() {
  [[ "${KERNEL_WITH_DRIVER:-false}" == true || "${KERNEL_WITH_DRIVER:-false}" == false ]] ||
    fatal "KERNEL_WITH_DRIVER must be true or false, got '${KERNEL_WITH_DRIVER}'"
  check_max_startups
  [[ -z "${OS_VERSION:-}" || " ${SUPPORTED_UBUNTU} " == *" ${OS_VERSION} "* ]] ||
    fatal "OS_VERSION must be one of ${SUPPORTED_UBUNTU}, got '${OS_VERSION}'"
  [[ -z "${ROOT_VOLUME_GIB:-}" || "${ROOT_VOLUME_GIB}" =~ ^[1-9][0-9]*$ ]] ||
    fatal "ROOT_VOLUME_GIB must be a size in GiB, got '${ROOT_VOLUME_GIB}'"
  [[ -z "${SSH_USER:-}${AUTHORIZED_KEYS:-}" ]] && return 0
  require_vars SSH_USER AUTHORIZED_KEYS
  local line entry
  while IFS= read -r line; do
    [[ -z "${line}" || "${line}" =~ ${KEY_RE} ]] ||
      fatal "AUTHORIZED_KEYS: a line is not an OpenSSH public key: '${line:0:40}...'"
  done <<<"${AUTHORIZED_KEYS}"
  # getent exits 2 for a user it does not know: that is the case the check below names.
  entry="$(getent passwd "${SSH_USER}")" || entry=""
  HOME_DIR="$(cut -d: -f6 <<<"${entry}")"
  [[ -n "${HOME_DIR}" && -d "${HOME_DIR}" ]] ||
    fatal "user ${SSH_USER} expected with a home directory, getent finds '${HOME_DIR}';" \
      "ssh.user must name a user this host has (the image's login user, e.g. ubuntu)"
}

# sshd_config(5) MaxStartups start:rate:full: start <= full, rate 1-100 (servconf.c refuses
# anything else, and sshd would not start).
check_max_startups() {
  [[ -z "${SSHD_MAX_STARTUPS:-}" ]] && return 0
  local start rate full
  [[ "${SSHD_MAX_STARTUPS}" =~ ^([0-9]+):([0-9]+):([0-9]+)$ ]] ||
    fatal "SSHD_MAX_STARTUPS must be start:rate:full like 100:30:200, got '${SSHD_MAX_STARTUPS}'"
  start="$((10#${BASH_REMATCH[1]}))" rate="$((10#${BASH_REMATCH[2]}))"
  full="$((10#${BASH_REMATCH[3]}))"
  ((start >= 1 && start <= full && rate >= 1 && rate <= 100)) ||
    fatal "SSHD_MAX_STARTUPS ${SSHD_MAX_STARTUPS}: expected 1 <= start <= full and rate 1-100"
}

wait_for_cloud_init_to_finish() {
  wait_for_cloud_init
}

# os_release_field <key> <file>: the value of KEY=value or KEY="value".
os_release_field() {
  awk -F= -v k="$1" '$1 == k { v = substr($0, length(k) + 2); gsub(/^"|"$/, "", v); print v }' "$2"
}

check_operating_system() {
  local file=/etc/os-release id version
  [[ -r "${file}" ]] || fatal "cannot read ${file}; expected Ubuntu ${SUPPORTED_UBUNTU// / or }"
  id="$(os_release_field ID "${file}")"
  version="$(os_release_field VERSION_ID "${file}")"
  if [[ "${id}" != ubuntu || " ${SUPPORTED_UBUNTU} " != *" ${version} "* ]]; then
    fatal "unsupported OS: ${id:-unknown} ${version:-unknown}; expected Ubuntu ${SUPPORTED_UBUNTU// / or }"
  fi
  if [[ -n "${OS_VERSION:-}" && "${version}" != "${OS_VERSION}" ]]; then
    fatal "Ubuntu ${OS_VERSION} expected (the pool's osVersion, whose packages the next steps" \
      "install), this host runs Ubuntu ${version}; set osVersion: \"${version}\" on its pool"
  fi
  log "Ubuntu ${version}"
}

# apt-daily.service (apt-get update) and apt-daily-upgrade.service (unattended-upgrade) start
# from their timers on first boot. They are Type=oneshot: "activating" while they run, which
# `systemctl is-active` reports with a non-zero status, so the state itself is compared.
wait_for_apt_daily() {
  local limit="${APT_DAILY_TIMEOUT_SECONDS:-900}" poll="${APT_DAILY_POLL_SECONDS:-5}"
  local waited=0 unit state busy
  while true; do
    busy=()
    for unit in apt-daily.service apt-daily-upgrade.service; do
      state="$(systemctl is-active "${unit}")" || :
      if [[ "${state}" == active || "${state}" == activating || "${state}" == reloading ]]; then
        busy+=("${unit}")
      fi
    done
    if ((${#busy[@]} == 0)); then
      log "no apt-daily run in progress"
      return 0
    fi
    if awk -v w="${waited}" -v l="${limit}" 'BEGIN { exit !(w >= l) }'; then
      fatal "${busy[*]} still running after ${limit}s (first-boot package updates);" \
        "see journalctl -u ${busy[0]}"
    fi
    log "waiting for ${busy[*]} (first-boot package updates) to finish (${waited}s of ${limit}s)"
    sleep "${poll}"
    waited="$(awk -v w="${waited}" -v p="${poll}" 'BEGIN { print w + p }')"
  done
}

# DPkg::Lock::Timeout covers the dpkg frontend lock only: apt-get update fails at once while
# another apt holds /var/lib/apt/lists/lock, so it is retried (with backoff) until it is free.
# The keyrings of the repositories the host has are renewed first (renew_pinned_keyrings).
wait_for_apt_and_refresh_lists() {
  renew_pinned_keyrings
  apt_update "${APT_LISTS_RETRIES:-8}"
}

write_authorized_keys() {
  if [[ -z "${SSH_USER:-}" ]]; then
    log "no keys to write"
    return 0
  fi
  local dir="${HOME_DIR}/.ssh" staged changed group
  group="$(id -gn "${SSH_USER}")"
  staged="$(temp_path authorized_keys)"
  {
    printf '# Managed by gpu-cluster (ssh.publicKey): edits are replaced on the next pulumi up.\n'
    printf '%s\n' "${AUTHORIZED_KEYS}" | awk 'NF && !seen[$0]++'
  } >"${staged}"
  install -d -m 0700 -o "${SSH_USER}" -g "${group}" "${dir}"
  changed="$(install_file_if_changed "${staged}" "${dir}/authorized_keys" 0600)"
  chown "${SSH_USER}:${group}" "${dir}/authorized_keys"
  if [[ "${changed}" == changed ]]; then
    log "authorized_keys of ${SSH_USER} now holds $(grep -cv '^#' "${dir}/authorized_keys") key(s)"
  fi
}

# The first-boot unattended-upgrades run (apt-daily-upgrade.timer is Persistent) may have
# installed a newer kernel already; the nouveau step moves to it. From here on none arrives.
hold_the_kernel_until_the_driver() {
  if [[ "${KERNEL_WITH_DRIVER:-false}" != true ]]; then
    log "not a GPU node: kernel updates left to unattended-upgrades"
    return 0
  fi
  keep_kernel_with_the_driver
}

# The root filesystem fills the root volume: after `rootVolumeGiB` grew, the provider modifies
# the volume in place and the disk shows the new size once EBS has applied it; the partition
# (growpart) and then the filesystem (resize2fs, or xfs_growfs) are grown online.
grow_root_filesystem() {
  if [[ -z "${ROOT_VOLUME_GIB:-}" ]]; then
    log "no root volume size given: not growing"
    return 0
  fi
  local source fstype fs_bytes part disk number want disk_bytes part_bytes out status
  local limit="${ROOT_GROW_TIMEOUT_SECONDS:-600}" deadline
  read -r source fstype fs_bytes < <(findmnt -bno SOURCE,FSTYPE,SIZE /)
  part="${source#/dev/}"
  disk="$(lsblk -no PKNAME "${source}")"
  number="${part##*[!0-9]}"
  [[ -n "${disk}" && -n "${number}" ]] ||
    fatal "the root filesystem ${source} is not on a partition of a disk (lsblk found" \
      "'${disk}', partition '${number}'): cannot grow it to ${ROOT_VOLUME_GIB} GiB"
  want=$((ROOT_VOLUME_GIB * 1024 * 1024 * 1024))
  deadline=$((SECONDS + limit))
  while disk_bytes="$(lsblk -bdno SIZE "/dev/${disk}")" && ((disk_bytes < want)); do
    ((SECONDS < deadline)) ||
      fatal "/dev/${disk} is $((disk_bytes / 1024 / 1024 / 1024)) GiB after ${limit}s," \
        "${ROOT_VOLUME_GIB} GiB expected (rootVolumeGiB): the volume modification has not" \
        "reached the machine; see 'aws ec2 describe-volumes-modifications'"
    log "waiting for /dev/${disk} to show ${ROOT_VOLUME_GIB} GiB (now ${disk_bytes} bytes)"
    sleep 5
  done
  part_bytes="$(lsblk -bdno SIZE "${source}")"
  # A partition within 16 MiB of the disk's end, a filesystem within 5% of the partition
  # (its own metadata): nothing to grow.
  if ((part_bytes + 16 * 1024 * 1024 >= disk_bytes && fs_bytes * 100 >= part_bytes * 95)); then
    log "root filesystem ${source} already fills /dev/${disk} (${ROOT_VOLUME_GIB} GiB)"
    return 0
  fi
  status=0
  out="$(growpart "/dev/${disk}" "${number}" 2>&1)" || status=$?
  if ((status == 1)) && [[ "${out}" == NOCHANGE:* ]]; then
    log "partition ${source} already fills /dev/${disk}"
  elif ((status != 0)); then
    fatal "growpart /dev/${disk} ${number} failed (exit ${status}): ${out}"
  else
    log "partition ${source} grown: ${out}"
  fi
  case "${fstype}" in
    ext4 | ext3 | ext2) resize2fs "${source}" >&2 ;;
    xfs) xfs_growfs / >&2 ;;
    *) fatal "root filesystem ${source} is ${fstype}: only ext4 and xfs are grown" ;;
  esac
  log "root filesystem ${source} grown to fill /dev/${disk}"
}

# The drop-in, written only when it differs; a refused config is put back as it was before sshd
# reads it, and sshd is reloaded (new connections only: this session and others go on) only
# when the file changed. A setting read first elsewhere stays if it is at least as large, and is
# named otherwise.
configure_sshd_fan_in() {
  if [[ -z "${SSHD_MAX_STARTUPS:-}" ]]; then
    log "sshd: MaxStartups left as configured"
    return 0
  fi
  local staged previous changed effective
  staged="$(temp_path sshd-fan-in.conf)"
  previous="$(temp_path sshd-fan-in.previous)"
  printf '%s\n' "# Managed by gpu-cluster: the SSH connections of this control plane's fleet." \
    "MaxStartups ${SSHD_MAX_STARTUPS}" >"${staged}"
  if [[ -e "${SSHD_DROP_IN}" ]]; then cp -p "${SSHD_DROP_IN}" "${previous}"; fi
  changed="$(install_file_if_changed "${staged}" "${SSHD_DROP_IN}" 0644)"
  if [[ "${changed}" == changed ]] && ! sshd -t >&2; then
    if [[ -e "${previous}" ]]; then
      cp -p "${previous}" "${SSHD_DROP_IN}"
    else
      rm -f "${SSHD_DROP_IN}"
    fi
    fatal "sshd -t refused the configuration with MaxStartups ${SSHD_MAX_STARTUPS}" \
      "(${SSHD_DROP_IN} put back as it was); see the error above"
  fi
  effective="$(sshd -T | awk '$1 == "maxstartups" { print $2 }')"
  if [[ "${effective}" != "${SSHD_MAX_STARTUPS}" ]]; then
    # A site's own setting (a control plane that more stacks' nodes join) is kept when it
    # takes at least as many connections for certain.
    local have="${effective%%:*}"
    if [[ ! "${have}" =~ ^[0-9]+$ ]] || ((have < ${SSHD_MAX_STARTUPS%%:*})); then
      fatal "sshd reads MaxStartups ${effective:-unset}, below ${SSHD_MAX_STARTUPS}: a file" \
        "under /etc/ssh/sshd_config.d sorted before ${SSHD_DROP_IN##*/}, or sshd_config" \
        "before its Include, sets it first; raise or remove that setting"
    fi
    log "sshd: MaxStartups ${effective} set elsewhere takes this fleet (${SSHD_MAX_STARTUPS})"
  fi
  if [[ "${changed}" != changed ]]; then
    log "sshd: MaxStartups ${SSHD_MAX_STARTUPS} already in effect, not reloading"
    return 0
  fi
  systemctl try-reload-or-restart ssh.service
  log "sshd: MaxStartups ${SSHD_MAX_STARTUPS}, reloaded"
}

main() {
  init_script ready
  check_inputs
  make_temp_dir
  run_steps \
    wait_for_cloud_init_to_finish \
    check_operating_system \
    wait_for_apt_daily \
    wait_for_apt_and_refresh_lists \
    write_authorized_keys \
    grow_root_filesystem \
    configure_sshd_fan_in \
    hold_the_kernel_until_the_driver
  log "host ready"
}

main "$@"
