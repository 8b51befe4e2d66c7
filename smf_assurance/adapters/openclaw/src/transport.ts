/**
 * The bus as the hook needs it, and its NATS implementation.
 *
 * RUNTIMES.md, "OpenClaw": `register()` runs several times per process, so
 * nothing connects there. One connection per NATS URL is made lazily by the
 * first hook call that needs it and shared by every registration in the
 * process; a closed connection is replaced by the next call, never in a loop
 * of its own (as the Hermes bridge does, `smf_assurance/adapters/hermes/bridge.py`).
 *
 * Every failure surfaces as a {@link BusError} with a reason code, which the
 * hook turns into a block: `gate_unreachable` (no connection, or nobody serves
 * the subject), `gate_timeout` (no reply within the deadline),
 * `bus_credential_refused` (the server refused this runtime's nkey),
 * the seed file's own reason code when it can no longer be read at connect
 * (`contract/bus_access.ts`), `gate_transport_error` (anything else).
 *
 * The connection carries the runtime's credential: its nkey (the seed is read
 * from its file at each connect and handed to the client only for the
 * signature) and the inbox prefix `_INBOX.<principal>`, the one inbox the
 * server lets this principal read.
 */

import { connect, errors, headers as natsHeaders, nkeyAuthenticator, type Msg, type NatsConnection } from "@nats-io/transport-node";
import { CredentialFileError, inboxPrefix, readSeed } from "./contract/bus_access.js";
import type { BusIdentity } from "./config.js";

export class BusError extends Error {
  override name = "BusError";
  constructor(readonly reasonCode: string, detail = "") {
    super(detail ? `${reasonCode}: ${detail}` : reasonCode);
  }
}

export interface Reply {
  data: Uint8Array;
  headers: ReadonlyMap<string, string>;
}

/** A subscription whose messages are queued until read; registered at the server when returned. */
export interface Inbox {
  /** The next message, or `undefined` when `timeoutMs` passes or `signal` aborts first. */
  next(timeoutMs: number, signal?: AbortSignal): Promise<Uint8Array | undefined>;
  close(): void;
}

export interface Bus {
  request(subject: string, data: Uint8Array, timeoutMs: number, headers?: Record<string, string>): Promise<Reply>;
  subscribe(subject: string): Promise<Inbox>;
}

export const CONNECT_TIMEOUT_MS = 2000;

function replyHeaders(msg: Msg): Map<string, string> {
  const out = new Map<string, string>();
  const h = msg.headers;
  if (h === undefined) return out;
  for (const key of h.keys()) out.set(key, h.get(key));
  return out;
}

function reasonFor(error: unknown): BusError {
  if (error instanceof BusError) return error;
  if (error instanceof CredentialFileError) return new BusError(error.reasonCode, error.detail);
  if (error instanceof errors.AuthorizationError) return new BusError("bus_credential_refused", "the server refused this runtime's bus credential");
  if (error instanceof errors.RequestError && error.isNoResponders()) return new BusError("gate_unreachable", "no responders");
  if (error instanceof errors.NoRespondersError) return new BusError("gate_unreachable", "no responders");
  if (error instanceof errors.TimeoutError) return new BusError("gate_timeout", "no reply in time");
  if (error instanceof errors.RequestError && error.cause instanceof errors.TimeoutError) {
    return new BusError("gate_timeout", "no reply in time");
  }
  if (error instanceof errors.ConnectionError || error instanceof errors.ClosedConnectionError) {
    return new BusError("gate_unreachable", error.message);
  }
  const code = (error as { code?: unknown } | null)?.code;
  if (code === "ECONNREFUSED" || code === "ENOTFOUND" || code === "ETIMEDOUT") {
    return new BusError("gate_unreachable", String(code));
  }
  return new BusError("gate_transport_error", error instanceof Error ? error.name : typeof error);
}

class QueueInbox implements Inbox {
  private readonly queue: Uint8Array[] = [];
  private waiter: ((value: Uint8Array | undefined) => void) | undefined;
  private closed = false;

  constructor(private readonly unsubscribe: () => void) {}

  push(data: Uint8Array): void {
    if (this.closed) return;
    const waiter = this.waiter;
    if (waiter !== undefined) {
      this.waiter = undefined;
      waiter(data);
    } else if (this.queue.length < 64) {
      this.queue.push(data);
    }
  }

  next(timeoutMs: number, signal?: AbortSignal): Promise<Uint8Array | undefined> {
    const ready = this.queue.shift();
    if (ready !== undefined) return Promise.resolve(ready);
    if (this.closed || signal?.aborted === true || timeoutMs <= 0) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const finish = (value: Uint8Array | undefined): void => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        this.waiter = undefined;
        resolve(value);
      };
      const onAbort = (): void => finish(undefined);
      // Unref'd: a wait never keeps the host process alive by itself.
      const timer = setTimeout(() => finish(undefined), timeoutMs);
      timer.unref();
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiter = finish;
    });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.waiter?.(undefined);
    this.waiter = undefined;
    try {
      this.unsubscribe();
    } catch {
      // Already closed with its connection: nothing left to release.
    }
  }
}

/** A lazily connected, shared NATS connection. */
export class NatsBus implements Bus {
  private nc: NatsConnection | undefined;
  private connecting: Promise<NatsConnection> | undefined;

  /** `caFile`: the bus's CA; the connection is then TLS before the server's greeting, so
   * a server that offers none gets no nkey signature over its nonce. */
  constructor(readonly url: string, readonly credential: BusIdentity, readonly caFile: string | null = null, readonly name = "smf-openclaw-adapter") {}

  private async connection(): Promise<NatsConnection> {
    const current = this.nc;
    if (current !== undefined && !current.isClosed()) return current;
    if (this.connecting === undefined) {
      const seedFile = this.credential.seedFile;
      this.connecting = connect({
        servers: this.url,
        name: this.name,
        // confined: no seed here; the launcher's forwarder answers the server's nonce
        ...(seedFile === null ? {} : { authenticator: nkeyAuthenticator(() => readSeed(seedFile)) }),
        inboxPrefix: inboxPrefix(this.credential.principal),
        ...(this.caFile === null ? {} : { tls: { caFile: this.caFile, handshakeFirst: true } }),
        timeout: CONNECT_TIMEOUT_MS,
        // A few attempts, not forever: an unreachable bus must fail a call, not
        // hang it; a connection that gives up is made anew by the next call.
        maxReconnectAttempts: 3,
        reconnectTimeWait: 200,
      }).then(
        (nc) => {
          this.nc = nc;
          this.connecting = undefined;
          return nc;
        },
        (error: unknown) => {
          this.connecting = undefined;
          if (error instanceof CredentialFileError || error instanceof errors.AuthorizationError) throw reasonFor(error);
          throw new BusError("gate_unreachable", error instanceof Error ? error.message : "connect failed");
        },
      );
    }
    return this.connecting;
  }

  async request(subject: string, data: Uint8Array, timeoutMs: number, headers?: Record<string, string>): Promise<Reply> {
    try {
      const nc = await this.connection();
      let h;
      if (headers !== undefined) {
        h = natsHeaders();
        for (const [key, value] of Object.entries(headers)) h.set(key, value);
      }
      const msg = await nc.request(subject, data, { timeout: timeoutMs, ...(h === undefined ? {} : { headers: h }) });
      return { data: msg.data, headers: replyHeaders(msg) };
    } catch (error) {
      throw reasonFor(error);
    }
  }

  async subscribe(subject: string): Promise<Inbox> {
    try {
      const nc = await this.connection();
      let inbox: QueueInbox | undefined;
      let refused = false;
      const sub = nc.subscribe(subject, {
        callback: (err, msg) => {
          if (err === null) inbox?.push(msg.data);
          else refused = err instanceof errors.PermissionViolationError;
        },
      });
      inbox = new QueueInbox(() => sub.unsubscribe());
      // The server must know the subscription before anyone acts on it: flush
      // is a round trip after the SUB, so nothing published later is missed.
      // The server answers a SUB it refuses before that PONG, so a subscription
      // outside this principal's permissions fails here, not by a silent wait.
      await nc.flush();
      if (refused) {
        inbox.close();
        throw new BusError("bus_permission_denied", `the server refused a subscription to ${subject}`);
      }
      return inbox;
    } catch (error) {
      throw reasonFor(error);
    }
  }

  async close(): Promise<void> {
    const nc = this.nc;
    this.nc = undefined;
    if (nc !== undefined && !nc.isClosed()) await nc.close();
  }
}

const shared = new Map<string, NatsBus>();

/** One bus per URL and credential per process, shared by every registration of the plugin. */
export function sharedBus(url: string, credential: BusIdentity, caFile: string | null = null): NatsBus {
  const key = JSON.stringify([url, credential.principal, credential.seedFile, caFile]);
  let bus = shared.get(key);
  if (bus === undefined) {
    bus = new NatsBus(url, credential, caFile);
    shared.set(key, bus);
  }
  return bus;
}

/** Close every shared connection (tests and process shutdown). */
export async function closeSharedBuses(): Promise<void> {
  const all = [...shared.values()];
  shared.clear();
  await Promise.all(all.map((bus) => bus.close().catch(() => undefined)));
}
