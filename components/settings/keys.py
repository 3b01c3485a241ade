"""SSH key fields of the settings: a host key to pin (ED25519 or ECDSA, as pulumi-command can
check it) and the login key EC2 imports (ED25519, or RSA of at least 3072 bits), each parsed from
its wire form (RFC 4253 6.6) and exactly one line, so no value authorizes or trusts a second
key."""

from __future__ import annotations

import base64
import binascii
import unicodedata
from typing import Annotated

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

# pulumi-command offers only the pinned key's own type as host key algorithm
# (`connection.go`: `HostKeyAlgorithms = []string{publicKey.Type()}`): for an RSA key that is
# "ssh-rsa" (SHA-1), which OpenSSH servers refuse since 8.8, so RSA host keys cannot be pinned.
_HOST_KEY_TYPES = (
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
)


# Characters that end or bend a line: Unicode's control characters (category Cc: newline,
# carriage return, tab, NUL, ESC...) and its line and paragraph separators. authorized_keys and
# known_hosts are read line by line, so one of these inside a key value adds a key.
_LINE_BREAKING = frozenset({"Zl", "Zp", "Cc"})


def control_characters(value: str) -> list[str]:
    """The control and line-separator characters in `value`, as `U+000A` names."""
    return [f"U+{ord(c):04X}" for c in value if unicodedata.category(c) in _LINE_BREAKING]


def _one_line(value: str) -> str:
    """A key value is exactly one line with no control characters (checked before any other
    rule, so the message says what is wrong with it)."""
    found = control_characters(value)
    if found:
        raise PydanticCustomError(
            "one_line",
            "exactly one line without control characters (found {found}): paste only the one "
            "key line; a newline inside it would authorize or trust a second key",
            {"found": ", ".join(dict.fromkeys(found))},
        )
    return value


def _host_key(value: str) -> str:
    """An authorized_keys line without options, as `ssh-keyscan` prints it less the host name
    (pulumi-command parses it with `ssh.ParseAuthorizedKey`): a key type, then the key blob in
    base64, whose own first field names the same type."""
    expected = (
        "an ED25519 or ECDSA SSH host public key line like 'ssh-ed25519 AAAA...', as in "
        "/etc/ssh/ssh_host_ed25519_key.pub on that host (RSA cannot be pinned: it would be "
        "checked with ssh-rsa signatures, which current OpenSSH servers refuse)"
    )
    key = _public_key(value, _HOST_KEY_TYPES)
    if key is None:
        raise PydanticCustomError("ssh_host_key", expected)
    return " ".join(key[:2])


SshHostKey = Annotated[str, AfterValidator(_one_line), AfterValidator(_host_key)]

# EC2 imports the login key as a key pair, and ImportKeyPair takes "the public key from an RSA
# or ED25519 key pair" only (EC2 API reference, ImportKeyPair): an ECDSA or security-key line
# would pass here and fail at `pulumi up`, after the network exists.
_LOGIN_KEY_SHAPES = {"ssh-ed25519": 2, "ssh-rsa": 3}  # type, then its key fields (RFC 4253 6.6)
_ED25519_KEY_BYTES = 32  # RFC 8709, section 4
# An RSA login key's modulus has at least this many bits: NIST SP 800-57 Part 1 Rev. 5, table 2,
# gives 2048-bit RSA 112 bits of security, acceptable only through 2030, and 3072 bits 128, as
# ed25519 has (RFC 8032, section 1). Measured on the modulus the key holds (the `n` mpint of
# RFC 4253 6.6), not on the length of its text: leading zero bytes add nothing.
MIN_RSA_LOGIN_KEY_BITS = 3072


def _login_key(value: str) -> str:
    """An OpenSSH public key line (type, base64 key, optional comment) of a type EC2 imports,
    whose key decodes whole: a line cut short in a copy and paste fails here, not at AWS. The
    value is kept as given: the key pairs are created from it."""
    expected = (
        "an OpenSSH ED25519 (or RSA, at least 3072 bits) public key line like "
        "'ssh-ed25519 AAAA... ops@example', as in ~/.ssh/id_ed25519.pub (EC2 key pairs take "
        "only those two types)"
    )
    key = _public_key(value, tuple(_LOGIN_KEY_SHAPES))
    if key is None:
        raise PydanticCustomError("ssh_public_key", expected)
    key_type, _text, parts = key
    if len(parts) != _LOGIN_KEY_SHAPES[key_type] or (
        key_type == "ssh-ed25519" and len(parts[1]) != _ED25519_KEY_BYTES
    ):
        raise PydanticCustomError("ssh_public_key", expected)
    if key_type == "ssh-rsa":
        bits = int.from_bytes(parts[2], "big").bit_length()  # the modulus n (mpint)
        if bits < MIN_RSA_LOGIN_KEY_BITS:
            raise PydanticCustomError(
                "ssh_public_key_strength",
                "an ED25519 key, or an RSA key of at least {minimum} bits (this one has {bits}): "
                "make one with `ssh-keygen -t ed25519` and set ssh.publicKey and sshPrivateKey "
                "to it",
                {"minimum": MIN_RSA_LOGIN_KEY_BITS, "bits": bits},
            )
    return value


SshPublicKey = Annotated[str, AfterValidator(_one_line), AfterValidator(_login_key)]


def _public_key(value: str, types: tuple[str, ...]) -> tuple[str, str, list[bytes]] | None:
    """(type, base64 text, the blob's fields) of a public key line `<type> <base64> [comment]`
    whose type is one of `types` and whose blob decodes whole and names the same type; None
    otherwise. The comment may be any text."""
    fields = value.split(maxsplit=2)
    if len(fields) < 2 or fields[0] not in types:
        return None
    parts = _key_blob(fields[1])
    if not parts or parts[0] != fields[0].encode():
        return None
    return fields[0], fields[1], parts


def _key_blob(text: str) -> list[bytes]:
    """The fields of a base64 SSH public key blob, each a 4-byte big-endian length and that
    many bytes (RFC 4253, section 6.6); [] when it is not base64 or does not split whole."""
    try:
        blob = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return []
    parts, at = [], 0
    while at < len(blob):
        if at + 4 > len(blob):
            return []
        length = int.from_bytes(blob[at : at + 4], "big")
        at += 4
        if length == 0 or at + length > len(blob):
            return []
        parts.append(blob[at : at + length])
        at += length
    return parts
