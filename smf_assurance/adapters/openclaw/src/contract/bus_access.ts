/**
 * Who the plugin is on the bus: the twin of `smf_assurance/subjects/bus_access.py`
 * (`inbox_prefix`, `read_credential`).
 *
 * The bus runs with authorization generated from the registry: every principal
 * connects with its own NATS user nkey and may read replies only on its own
 * inbox, `_INBOX.<principal>`. A runtime that connects with another prefix
 * never receives a reply (the server refuses the subscription), and one
 * without a registered nkey is refused at connect.
 *
 * The seed file is checked as the Python side checks it, with the same
 * reason codes: it must open as a regular file (`smf_bus_credential_unreadable`),
 * grant the group and others nothing (`smf_bus_credential_too_open`: a seed
 * another account could read may already be someone else's), and hold one
 * user nkey seed (`smf_bus_credential_invalid`). Errors name the file and the
 * problem, never a byte of its content. The seed's checksum is checked by
 * the NATS client's own nkeys code (`../config.ts`), outside the contract.
 */

import { closeSync, constants, fstatSync, openSync, readSync } from "node:fs";

export const INBOX_ROOT = "_INBOX";
/**
 * The JetStream API as every client but the gate calls it
 * (`smf_assurance.subjects.bus_access.CLIENT_API`): outside the gate's account the
 * server imports under this prefix exactly the calls the role may make, and maps it
 * onto `$JS.API` inside the gate's account and on a bus without authorization.
 */
export const CLIENT_API = "$JS.SMF.API";
export const MAX_SEED_FILE_BYTES = 4096;
/** Permission bits a seed file must not have: none for the group, none for others. */
export const SEED_FILE_MODE_MASK = 0o077;
/** A NATS user nkey seed as text: base32 of prefix, key and checksum, 58 characters. */
const USER_SEED_RE = /^SU[A-Z2-7]{56}$/;
const TOKEN_RE = /^[A-Za-z0-9_-]{1,64}$/;
const S_IFMT = 0o170000;
const S_IFREG = 0o100000;

export const CREDENTIAL_UNREADABLE = "smf_bus_credential_unreadable";
export const CREDENTIAL_TOO_OPEN = "smf_bus_credential_too_open";
export const CREDENTIAL_INVALID = "smf_bus_credential_invalid";

export class CredentialFileError extends Error {
  override name = "CredentialFileError";
  constructor(readonly reasonCode: string, readonly detail: string) {
    super(`${reasonCode}: ${detail}`);
  }
}

export class InboxPrefixError extends Error {
  override name = "InboxPrefixError";
}

/** The reply-subject prefix a principal must connect with (`smf_assurance.subjects.bus_access.inbox_prefix`). */
export function inboxPrefix(principal: string): string {
  if (!TOKEN_RE.test(principal)) throw new InboxPrefixError(`${JSON.stringify(principal)} is not a valid subject token`);
  return `${INBOX_ROOT}.${principal}`;
}

/** A principal and the file holding its nkey seed; the seed itself is never held here. */
export interface BusCredential {
  readonly principal: string;
  readonly seedFile: string;
}

/**
 * Read and check the seed file; return the seed's bytes (trimmed). Throws
 * {@link CredentialFileError}. Called at configuration time and again at every
 * connect, so a seed is held in memory only while a connection is made.
 */
export function readSeed(seedFile: string): Uint8Array {
  let fd: number;
  try {
    // O_NONBLOCK: a FIFO in the seed file's place opens at once (and is refused below
    // as not a regular file) instead of blocking the process until a writer comes.
    fd = openSync(seedFile, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    throw new CredentialFileError(CREDENTIAL_UNREADABLE, `cannot read ${seedFile}: ${typeof code === "string" ? code : "error"}`);
  }
  let data: Buffer;
  try {
    const info = fstatSync(fd);
    if ((info.mode & S_IFMT) !== S_IFREG) throw new CredentialFileError(CREDENTIAL_UNREADABLE, `${seedFile} is not a regular file`);
    if ((info.mode & SEED_FILE_MODE_MASK) !== 0) {
      const mode = (info.mode & 0o7777).toString(8).padStart(4, "0");
      throw new CredentialFileError(CREDENTIAL_TOO_OPEN, `${seedFile} has mode ${mode}; it must be 0600 or stricter`);
    }
    const buffer = Buffer.alloc(MAX_SEED_FILE_BYTES + 1);
    let length = 0;
    try {
      for (;;) {
        const n = readSync(fd, buffer, length, buffer.length - length, null);
        if (n === 0) break;
        length += n;
        if (length === buffer.length) break;
      }
    } catch (error) {
      const code = (error as { code?: unknown } | null)?.code;
      throw new CredentialFileError(CREDENTIAL_UNREADABLE, `cannot read ${seedFile}: ${typeof code === "string" ? code : "error"}`);
    }
    data = buffer.subarray(0, length);
  } finally {
    closeSync(fd);
  }
  const text = data.toString("latin1").trim();
  if (data.length > MAX_SEED_FILE_BYTES || !USER_SEED_RE.test(text)) {
    throw new CredentialFileError(CREDENTIAL_INVALID, `${seedFile} does not hold one NATS user nkey seed`);
  }
  return new TextEncoder().encode(text);
}

/** Check a principal's seed file (`smf_assurance.subjects.bus_access.read_credential`). */
export function readCredential(principal: string, seedFile: string): BusCredential {
  try {
    inboxPrefix(principal);
  } catch {
    throw new CredentialFileError(CREDENTIAL_INVALID, "the principal is not a subject token");
  }
  readSeed(seedFile).fill(0);
  return { principal, seedFile };
}
