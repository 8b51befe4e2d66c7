/**
 * Signing by the launcher of a confined runtime (`smf_assurance.subjects.signer`, the
 * same wire): the runtime key never enters the sandbox; `SMF_SIGNER_SOCKET` names the
 * launcher's signer, which signs only what a runtime signs for itself.
 *
 * The plugin signs synchronously (proposals, attestations, instance proofs, reports
 * are built and signed in one call), and Node has no synchronous socket. So the
 * socket lives in a worker thread, and {@link RemoteSigner} waits for the worker's
 * answer with `Atomics.wait` on a shared buffer, at most {@link TIMEOUT_MS}: every
 * way that can end other than with a verified signature throws a
 * {@link SignerError} with a reason code, and the caller fails closed (the call it
 * was signing for is blocked). Each signature is checked against the public key the
 * identity answer named.
 */

import { Worker } from "node:worker_threads";
import { keyIdOf, PUBLIC_KEY_BYTES, SIGNATURE_BYTES, VerifyKey, type Signer } from "./contract/keys.js";

export const SIGNER_SOCKET_ENV = "SMF_SIGNER_SOCKET";
export const TIMEOUT_MS = 5000;
const ANSWER_BYTES = 256 * 1024;

export class SignerError extends Error {
  constructor(readonly reasonCode: string, detail = "") {
    super(detail ? `${reasonCode}: ${detail}` : reasonCode);
  }
}

/** The worker: one connection, one request at a time, the answer line into the buffer. */
const WORKER = `
const { parentPort, workerData } = require("node:worker_threads");
const net = require("node:net");
const ctrl = new Int32Array(workerData.shared, 0, 2);
const out = new Uint8Array(workerData.shared, 8);
let socket = null;
let buffered = Buffer.alloc(0);
let pending = false;
function answer(text) {
  let bytes = Buffer.from(text);
  if (bytes.length > out.length) bytes = Buffer.from('{"error":"signer_answer_too_long"}');
  out.set(bytes);
  Atomics.store(ctrl, 1, bytes.length);
  Atomics.store(ctrl, 0, 2);
  Atomics.notify(ctrl, 0);
}
function gone() {
  socket = null;
  buffered = Buffer.alloc(0);
  if (pending) { pending = false; answer('{"error":"signer_unavailable"}'); }
}
function connect() {
  const s = net.createConnection(workerData.path);
  s.on("data", (chunk) => {
    buffered = Buffer.concat([buffered, chunk]);
    const end = buffered.indexOf(10);
    if (end >= 0 && pending) {
      const line = buffered.subarray(0, end).toString("utf8");
      buffered = buffered.subarray(end + 1);
      pending = false;
      answer(line);
    }
  });
  s.on("error", () => { if (socket === s) gone(); });
  s.on("close", () => { if (socket === s) gone(); });
  return s;
}
parentPort.on("message", (line) => {
  pending = true;
  if (socket === null) socket = connect();
  socket.write(line);
});
`;

class SyncSocket {
  private readonly shared = new SharedArrayBuffer(8 + ANSWER_BYTES);
  private readonly ctrl = new Int32Array(this.shared, 0, 2);
  private readonly worker: Worker;

  constructor(path: string) {
    this.worker = new Worker(WORKER, { eval: true, workerData: { path, shared: this.shared } });
    this.worker.unref();
  }

  ask(request: Record<string, string>): Record<string, unknown> {
    Atomics.store(this.ctrl, 0, 1);
    this.worker.postMessage(JSON.stringify(request) + "\n");
    if (Atomics.wait(this.ctrl, 0, 1, TIMEOUT_MS) === "timed-out") {
      throw new SignerError("signer_unavailable", "no answer in time");
    }
    const length = Atomics.load(this.ctrl, 1);
    const text = Buffer.from(new Uint8Array(this.shared, 8, length)).toString("utf8");
    let answer: unknown;
    try {
      answer = JSON.parse(text);
    } catch {
      throw new SignerError("signer_invalid_answer", "the answer is not JSON");
    }
    if (typeof answer !== "object" || answer === null || Array.isArray(answer)) {
      throw new SignerError("signer_invalid_answer", "the answer is not an object");
    }
    const error = (answer as Record<string, unknown>).error;
    if (error === "signer_unavailable") throw new SignerError("signer_unavailable");
    if (error !== undefined) throw new SignerError("signer_refused", String(error).slice(0, 64));
    return answer as Record<string, unknown>;
  }

  close(): void {
    void this.worker.terminate();
  }
}

function b64(value: unknown, what: string, length: number): Buffer {
  if (typeof value !== "string") throw new SignerError("signer_invalid_answer", `${what} is not text`);
  const raw = Buffer.from(value, "base64");
  if (raw.length !== length || raw.toString("base64") !== value) {
    throw new SignerError("signer_invalid_answer", `${what} is not ${length} bytes of base64`);
  }
  return raw;
}

/** The runtime's key, held by its launcher; signs synchronously over the socket. */
export class RemoteSigner implements Signer {
  private constructor(
    private readonly socket: SyncSocket,
    readonly principal: string,
    private readonly verifyKey: VerifyKey,
  ) {}

  /** Ask the signer at `path` who it signs as; throws {@link SignerError}. */
  static connect(path: string): RemoteSigner {
    const socket = new SyncSocket(path);
    try {
      const answer = socket.ask({ op: "identity" });
      const publicBytes = b64(answer.public_key, "public_key", PUBLIC_KEY_BYTES);
      const principal = answer.principal;
      if (typeof principal !== "string" || principal.length === 0 || answer.key_id !== keyIdOf(publicBytes)) {
        throw new SignerError("signer_invalid_answer", "the identity answer is not consistent");
      }
      return new RemoteSigner(socket, principal, new VerifyKey(publicBytes));
    } catch (error) {
      socket.close();
      throw error;
    }
  }

  get keyId(): string {
    return this.verifyKey.keyId;
  }

  get publicBytes(): Buffer {
    return this.verifyKey.publicBytes;
  }

  sign(message: Uint8Array): Buffer {
    const answer = this.socket.ask({ op: "sign", message: Buffer.from(message).toString("base64") });
    const signature = b64(answer.signature, "signature", SIGNATURE_BYTES);
    if (!this.verifyKey.verify(message, signature)) throw new SignerError("signer_invalid_answer", "the signature does not verify");
    return signature;
  }

  toString(): string {
    return `RemoteSigner(${this.keyId})`;
  }
}
