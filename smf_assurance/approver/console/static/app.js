// SMF approver console: plain JavaScript, no framework, no third-party code.
//
// Trust model (docs/CONSOLE.md): the approver's Ed25519 key is imported into
// WebCrypto as a non-extractable key and never leaves this tab. This page signs
// its sign-in, every show request and every resolution itself (DSSE over the
// canonical JSON bytes, exactly as smf_assurance/subjects/dsse.py does); the console server only
// relays. Before an allow-once is signed, this page recomputes the content hash,
// the argument hash, the destination hash and the binding digest from what it
// displays, and signs the digest it computed, so an approval can only ever be
// spent on the action that was shown.
//
// Decisions are deliberate: Allow once opens a confirm step naming the
// action and its destination, and only "Yes, allow once" signs; Deny opens a form
// that cannot be sent without a reason from the closed list (the radio buttons in
// index.html, the list smf_assurance/subjects/approvals.py DENY_REASONS declares), with an optional
// plain-text note. Reason and note are inside the signed resolution.

const LOGIN_TYPE = 'application/vnd.smf.console-login+json;v=1';
const SHOW_TYPE = 'application/vnd.smf.approval-show+json;v=1';
const RESOLUTION_TYPE = 'application/vnd.smf.approval-resolution+json;v=1';
const TRACK_TYPE = 'application/vnd.smf.approval-track+json;v=1';
const REREQUEST_TYPE = 'application/vnd.smf.approval-rerequest+json;v=1';
const GRANT_TYPE = 'application/vnd.smf.session-grant+json;v=1';
const ENROLMENT_TYPE = 'application/vnd.smf.passkey-enrolment+json;v=1';
const PASSKEY_WAIT_MS = 120000;
const REQUESTS_POLL_MS = 2000;
const POLL_MS = 1000;
const MAX_DEPTH = 64;
const IN_PROGRESS = new Set(['approved', 'executing']);
const FINISHED = new Set([
  'consumed', 'failed', 'execution_unknown', 'denied', 'expired', 'invalidated', 'unknown',
]);
const RETRYABLE = new Set(['gate_unreachable', 'gate_timeout', 'gate_transport_error']);
const MAX_NOTE_CHARS = 500;
// smf_assurance/subjects/patterns.py NOTE_PATTERN: newlines and tabs, no other control character,
// no line/paragraph separator, no bidi override or isolate.
const NOTE_FORBIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/u;
const utf8 = new TextEncoder();

// --- canonical JSON (RFC 8785 JCS + NFC), identities, DSSE ---------------------

export class CanonicalError extends Error {}

function nfc(text) {
  if (!text.isWellFormed()) throw new CanonicalError('lone surrogate');
  return text.normalize('NFC');
}

function canon(value, depth) {
  if (depth > MAX_DEPTH) throw new CanonicalError(`nesting deeper than ${MAX_DEPTH}`);
  if (value === null || value === true || value === false) return String(value);
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value)) {
      throw new CanonicalError('only integers within the I-JSON safe range');
    }
    return String(value); // String(-0) is "0", as the integer -0 is 0
  }
  // JCS serializes strings exactly as JSON.stringify does.
  if (typeof value === 'string') return JSON.stringify(nfc(value));
  if (Array.isArray(value)) return `[${value.map((v) => canon(v, depth + 1)).join(',')}]`;
  if (typeof value === 'object') {
    const items = new Map();
    for (const [key, item] of Object.entries(value)) {
      const normal = nfc(key);
      if (items.has(normal)) throw new CanonicalError('duplicate key after NFC normalization');
      items.set(normal, item);
    }
    // Array.prototype.sort compares UTF-16 code units: the order JCS requires.
    const keys = [...items.keys()].sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canon(items.get(k), depth + 1)}`).join(',')}}`;
  }
  throw new CanonicalError(`no JSON form for ${typeof value}`);
}

export function canonicalJson(value) {
  return canon(value, 0);
}

function hex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

export function b64encode(bytes) {
  let text = '';
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text);
}

function b64decode(text) {
  return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
}

function b64url(bytes) {
  return b64encode(bytes).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

export async function sha256Identity(bytes) {
  return `sha256:${hex(new Uint8Array(await crypto.subtle.digest('SHA-256', bytes)))}`;
}

export async function identityOf(value) {
  return sha256Identity(utf8.encode(canonicalJson(value)));
}

/** DSSE pre-authentication encoding: "DSSEv1" SP len(type) SP type SP len(body) SP body. */
export function pae(payloadType, payload) {
  const type = utf8.encode(payloadType);
  const head = utf8.encode(`DSSEv1 ${type.length} ${payloadType} ${payload.length} `);
  const out = new Uint8Array(head.length + payload.length);
  out.set(head);
  out.set(payload, head.length);
  return out;
}

/** Read an smf.ed25519.private/1 key file into a non-extractable signing key.
 *  Checks what smf_assurance/subjects/keys.py checks: the key id is the public key's, and the
 *  secret seed derives that public key. */
export async function importKeyFile(text) {
  let doc;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new Error('this file is not an approver key file (it is not JSON)');
  }
  if (doc === null || doc.kind !== 'smf.ed25519.private/1') {
    throw new Error('this file is not an smf.ed25519.private/1 key file');
  }
  const seed = b64decode(doc.secret_seed);
  const publicBytes = b64decode(doc.public_key);
  if (seed.length !== 32 || publicBytes.length !== 32) throw new Error('the key file is damaged');
  const keyId = `ed25519:${hex(new Uint8Array(await crypto.subtle.digest('SHA-256', publicBytes)))}`;
  if (keyId !== doc.key_id) throw new Error('the key file\'s key_id does not match its public key');
  const mismatch = 'the key file\'s secret does not belong to its public key';
  const jwk = { kty: 'OKP', crv: 'Ed25519', d: b64url(seed), x: b64url(publicBytes) };
  let privateKey;
  try {
    privateKey = await crypto.subtle.importKey('jwk', jwk, { name: 'Ed25519' }, false, ['sign']);
  } catch {
    throw new Error(mismatch); // Chromium checks that d derives x on import
  } finally {
    seed.fill(0);
    jwk.d = '';
  }
  const publicKey = await crypto.subtle.importKey('raw', publicBytes, { name: 'Ed25519' }, false, ['verify']);
  const probe = utf8.encode('smf-console key check');
  const signature = await crypto.subtle.sign({ name: 'Ed25519' }, privateKey, probe);
  if (!(await crypto.subtle.verify({ name: 'Ed25519' }, publicKey, signature, probe))) {
    throw new Error(mismatch); // and where a browser does not, this probe does
  }
  return { principal: doc.principal, keyId, privateKey };
}

/** A DSSE envelope over the canonical JSON of `value`, signed by `signer`. */
export async function signEnvelope(signer, payloadType, value) {
  const payload = utf8.encode(canonicalJson(value));
  const message = pae(payloadType, payload);
  const signature = new Uint8Array(
    await crypto.subtle.sign({ name: 'Ed25519' }, signer.privateKey, message),
  );
  return {
    payload: b64encode(payload),
    payloadType,
    signatures: [{ keyid: signer.keyId, sig: b64encode(signature) }],
  };
}

function b64urlDecode(text) {
  return b64decode(text.replace(/-/g, '+').replace(/_/g, '/').padEnd(Math.ceil(text.length / 4) * 4, '='));
}

// --- passkeys (smf_assurance/subjects/passkeys.py) ---------------------------------

/** The WebAuthn challenge that signs `payload` of `payloadType`: SHA-256 of the DSSE
 *  pre-authentication encoding, the bytes a key signs (passkeys.challenge_for). */
async function challengeFor(payloadType, payload) {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', pae(payloadType, payload)));
}

/** The challenge a person's registration uses (passkeys.enrolment_challenge). */
export async function enrolmentChallenge(principal, rpId) {
  return challengeFor(ENROLMENT_TYPE, utf8.encode(canonicalJson({ principal, rp_id: rpId })));
}

/** The first 64 bits of SHA-256 of the credential id, read aloud to the operator
 *  (passkeys.credential_fingerprint). */
export async function credentialFingerprint(credentialId) {
  const digest = hex(new Uint8Array(await crypto.subtle.digest('SHA-256', b64urlDecode(credentialId))));
  return [0, 4, 8, 12].map((i) => digest.slice(i, i + 4)).join('-');
}

/** `value` signed by the person's passkey: their authenticator asks them to verify
 *  (PIN or biometric) and signs the challenge of exactly these bytes. */
async function passkeySigned(payloadType, value, credentialId) {
  const payload = utf8.encode(canonicalJson(value));
  const publicKey = {
    challenge: await challengeFor(payloadType, payload),
    userVerification: 'required',
    timeout: PASSKEY_WAIT_MS,
  };
  if (credentialId) publicKey.allowCredentials = [{ type: 'public-key', id: b64urlDecode(credentialId) }];
  const credential = await navigator.credentials.get({ publicKey });
  const r = credential.response;
  const response = {
    clientDataJSON: b64url(new Uint8Array(r.clientDataJSON)),
    authenticatorData: b64url(new Uint8Array(r.authenticatorData)),
    signature: b64url(new Uint8Array(r.signature)),
  };
  if (r.userHandle && r.userHandle.byteLength) response.userHandle = b64url(new Uint8Array(r.userHandle));
  const rawId = b64url(new Uint8Array(credential.rawId));
  return {
    schema: 'smf.passkey-signed/1',
    payloadType,
    payload: b64encode(payload),
    assertion: { id: rawId, rawId, type: 'public-key', response },
  };
}

/** A person's read (show, track, ask again): an envelope by their key, or, signed in
 *  with a passkey, by the session key its sign-in granted, with the grant. */
async function signRead(me, payloadType, value) {
  const envelope = await signEnvelope(me, payloadType, value);
  return me.grant ? { schema: 'smf.passkey-delegated/1', grant: me.grant, envelope } : envelope;
}

/** A person's decision: an envelope by their key, or their passkey's own assertion,
 *  never the session key (the gate refuses a delegated resolution). */
async function signDecision(me, payloadType, value) {
  return me.grant ? passkeySigned(payloadType, value, me.credentialId) : signEnvelope(me, payloadType, value);
}

async function matches(compute, expected) {
  try {
    return (await compute()) === expected;
  } catch {
    return false; // no canonical form: it cannot match anything the gate bound
  }
}

/** Everything shown is what the binding covers: recomputed here, not taken on trust. */
export async function checkView(view, channel) {
  const binding = view.binding;
  const digest = await identityOf(binding);
  return {
    content: await matches(
      () => sha256Identity(utf8.encode(nfc(view.content))), binding.content_hash),
    arguments: await matches(
      () => identityOf(JSON.parse(view.arguments_json)), binding.canonical_args_hash),
    destination: await matches(
      () => identityOf({ channel, address: view.destination_address }),
      binding.destination_identity_hash),
    digest: digest === view.binding_digest,
    computedDigest: digest,
    attachments: await checkAttachments(view.arguments_json),
  };
}

/** Why a deny note cannot be sent, or '' when it can (smf_assurance.subjects.patterns.ApproverNote). */
export function noteProblem(note) {
  if ([...note.normalize('NFC')].length > MAX_NOTE_CHARS) {
    return `The note is longer than ${MAX_NOTE_CHARS} characters.`;
  }
  if (NOTE_FORBIDDEN.test(note)) {
    return 'The note may hold plain text, new lines and tabs only (no control or direction characters).';
  }
  return '';
}

function allChecksPass(checks) {
  return Boolean(checks && checks.content && checks.arguments && checks.destination && checks.digest
    && checks.attachments.every((a) => a.ok));
}

// --- what the gate's answers mean to a person ----------------------------------

const REFUSALS = {
  approval_expired: ['expired', 'the approval expired before your decision reached the gate'],
  approval_not_pending: ['already resolved', 'someone already decided it, or it was claimed'],
  resolver_lacks_required_role: ['wrong role', 'you do not hold every role this action requires'],
  resolver_not_entitled_for_tenant: ['wrong tenant', 'you are not an approver for this tenant'],
  self_approval: ['self-approval', 'you requested this action, so you cannot approve it'],
  binding_digest_mismatch: ['digest mismatch', 'what you saw is not what the gate holds'],
  binding_changed: ['binding changed', 'the release or the action changed since it was held'],
  approval_not_found: ['not found', 'the gate holds no such approval'],
  approval_closed: ['closed', 'the approval is closed and its content has been purged'],
  unknown_signer: ['unknown key', 'your key is not on the approver roster'],
  bad_signature: ['bad signature', 'your signature did not verify'],
  signer_role_mismatch: ['not an approver', 'your key is not an approver key'],
  resolver_identity_mismatch: ['identity mismatch', 'the signature is not from the named approver'],
  gate_unreachable: ['gate unreachable', 'no gate answered; nothing was decided'],
  gate_timeout: ['gate timeout', 'the gate did not answer in time; check the state before retrying'],
};

function refusalText(reasons, state) {
  const code = reasons[0] || 'refused';
  let [label, why] = REFUSALS[code] || [code.replace(/_/g, ' '), 'the gate refused it'];
  if (code === 'approval_not_pending' && (state === 'expired' || state === 'invalidated')) {
    [label, why] = [state, `the approval is ${state}`];
  }
  return `Refused: ${label}. ${why[0].toUpperCase()}${why.slice(1)} (${reasons.join(', ') || code}).`;
}

const OUTCOMES = {
  approved: 'Approved: the gate is claiming it',
  executing: 'Executing: the order went to the connector',
  consumed: 'Consumed: the connector confirmed it ran once',
  failed: 'Failed: the connector reported a failure; nothing is retried',
  execution_unknown: 'Execution unknown: no confirmation; it is never retried automatically',
  denied: 'Denied: nothing was sent',
  expired: 'Expired: nothing was sent',
  invalidated: 'Invalidated: nothing was sent',
};

// --- page state ------------------------------------------------------------------

const page = {
  me: null, // { principal, keyId, privateKey, tenants, licensed_roles }
  approvals: new Map(),
  known: new Set(),
  offsetMs: 0,
  selected: null,
  view: null,
  checks: null,
  closedReason: null,
  decided: null, // { decision, order_id }
  final: false, // true once the gate's answer means no further decision can help
  polling: false,
  linkHandled: false, // the notification's ?approval= is acted on once per page load
  pollTimer: null,
  blobUrls: [], // the documents on show; revoked when others replace them
  tickTimer: null,
  requests: new Map(), // the signed-in person's own requests, as the gate answered
  requestsPolling: false,
  requestsTrouble: false, // the requests' status line shows a failure to clear once it passes
  requestsTimer: null,
  receipts: new Map(), // approval id -> the connector's receipt, once the gate has shown it
  receiptAsked: new Set(), // approval ids whose receipt is being asked of the gate
  previews: new Map(), // approval id -> { view, display } the gate showed for the list's words
  previewing: false, // one show at a time for the list
  matter: '', // the list's matter filter ('' = every matter)
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === 'class') node.className = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child); // text is always a text node
  return node;
}

function now() {
  return Date.now() + page.offsetMs;
}

function timeLeft(approval) {
  return approval.expires_at_ms - now();
}

/** Time left as an attorney reads it: "expires in 4 min 12 s", or "expired". */
export function formatLeft(ms) {
  if (ms <= 0) return 'expired';
  const total = Math.floor(ms / 1000);
  const minutes = Math.floor(total / 60);
  const seconds = total % 60;
  return minutes ? `expires in ${minutes} min ${seconds} s` : `expires in ${seconds} s`;
}

/** What the countdown's live region says: it changes only when the whole
 *  minutes left change and at expiry, so a screen reader is not told every second. */
export function announceLeft(ms) {
  if (ms <= 0) return 'Expired: no decision can be sent.';
  const minutes = Math.floor(ms / 60000);
  if (!minutes) return 'Expires in less than a minute.';
  return `Expires in ${minutes} minute${minutes > 1 ? 's' : ''}.`;
}

const pad = (n, width = 2) => String(n).padStart(width, '0');

/** The absolute expiry in this browser's time zone, unambiguous:
 *  "2026-12-02 18:35:19 UTC+05:30 (Asia/Kolkata)"; the offset is the one in force
 *  at that instant, so a daylight-saving change in between is accounted for. */
export function formatExpiry(ms) {
  const at = new Date(ms);
  const offset = -at.getTimezoneOffset();
  const sign = offset < 0 ? '-' : '+';
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  return `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())} `
    + `${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())} `
    + `UTC${sign}${pad(Math.floor(Math.abs(offset) / 60))}:${pad(Math.abs(offset) % 60)}`
    + (zone ? ` (${zone})` : '');
}

function isOpen(approval) {
  return approval.state === 'pending' && timeLeft(approval) > 0;
}

function shownState(approval) {
  if (approval.state === 'pending' && timeLeft(approval) <= 0) return 'expired';
  return approval.state.replace(/_/g, ' ');
}

async function api(method, path, body) {
  const init = { method, credentials: 'same-origin', cache: 'no-store', headers: {} };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    return { status: 0, data: { ok: false, reason: 'console_unreachable' } };
  }
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = { ok: false, reason: 'unreadable_answer' };
  }
  return { status: response.status, data };
}

// --- sign-in -----------------------------------------------------------------------

function signinStatus(text) {
  $('signin-status').textContent = text;
}

async function signIn(file) {
  signinStatus('Checking your key…');
  const signer = await importKeyFile(await file.text());
  const challenge = await api('GET', '/api/challenge');
  if (challenge.status !== 200) throw new Error('the console did not issue a sign-in challenge');
  const login = await signEnvelope(signer, LOGIN_TYPE, {
    schema: 'smf.console-login/1',
    approver_id: signer.principal,
    nonce: challenge.data.nonce,
  });
  await startSession(signer, login);
}

/** Sign in with a passkey: one touch grants a key made here, which cannot be read
 *  back, the right to sign this person's reads until the session ends. */
async function signInWithPasskey(principal) {
  if (!principal) throw new Error('type your approver id first');
  signinStatus('Waiting for your passkey…');
  const challenge = await api('GET', '/api/challenge');
  if (challenge.status !== 200) throw new Error('the console did not issue a sign-in challenge');
  const pair = await crypto.subtle.generateKey({ name: 'Ed25519' }, false, ['sign', 'verify']);
  const publicBytes = new Uint8Array(await crypto.subtle.exportKey('raw', pair.publicKey));
  const issued = challenge.data.server_now_ms;
  const grant = await passkeySigned(GRANT_TYPE, {
    schema: 'smf.session-grant/1',
    principal,
    session_key: b64encode(publicBytes),
    nonce: challenge.data.nonce,
    issued_at_ms: issued,
    expires_at_ms: issued + challenge.data.session_ms,
  }, null);
  const signer = {
    principal,
    keyId: `ed25519:${hex(new Uint8Array(await crypto.subtle.digest('SHA-256', publicBytes)))}`,
    privateKey: pair.privateKey,
    grant,
    credentialId: grant.assertion.id,
  };
  await startSession(signer, grant);
}

async function startSession(signer, login) {
  const session = await api('POST', '/api/session', login);
  if (session.status !== 200) {
    throw new Error(`the console refused the sign-in (${session.data.reason})`);
  }
  page.me = { ...signer, ...session.data };
  $('who-name').textContent = page.me.approver_id;
  $('who-roles').textContent =
    `(${page.me.licensed_roles.join(', ') || 'no roles'}; ${page.me.tenants.join(', ') || 'no tenants'})`;
  $('who').hidden = false;
  $('signin').hidden = true;
  $('workspace').hidden = false;
  signinStatus('');
  $('board-title').focus?.();
  await poll();
  page.pollTimer = setInterval(poll, POLL_MS);
  page.tickTimer = setInterval(tick, 1000);
  await pollRequests();
  page.requestsTimer = setInterval(pollRequests, REQUESTS_POLL_MS);
}

function signOut(message) {
  clearInterval(page.pollTimer);
  clearInterval(page.tickTimer);
  clearInterval(page.requestsTimer);
  page.requests.clear();
  page.receipts.clear();
  page.receiptAsked.clear();
  page.previews.clear(); // what the gate showed this approver goes with the key
  page.matter = '';
  $('requests-list').replaceChildren();
  api('POST', '/api/logout', {});
  page.me = null; // the only reference to the CryptoKey
  page.approvals.clear();
  page.known.clear();
  page.selected = null;
  $('approvals').replaceChildren();
  $('detail').hidden = true;
  $('workspace').hidden = true;
  $('who').hidden = true;
  $('signin').hidden = false;
  signinStatus(message || 'Signed out. Your key is no longer held by this page.');
  $('key-file').focus();
}

/** Make a passkey for this console and show what the operator enrols: the
 *  registration (public key and credential id only) and its fingerprint. */
async function enrolPasskey(principal) {
  if (!principal) throw new Error('type your approver id first');
  $('enrol-status').textContent = 'Follow your browser: choose where to keep the passkey and verify it is you…';
  const rpId = location.hostname;
  const credential = await navigator.credentials.create({
    publicKey: {
      rp: { id: rpId, name: 'SMF approvals' },
      user: { id: utf8.encode(principal), name: principal, displayName: principal },
      challenge: await enrolmentChallenge(principal, rpId),
      pubKeyCredParams: [-8, -7, -257].map((alg) => ({ type: 'public-key', alg })),
      authenticatorSelection: { residentKey: 'required', userVerification: 'required' },
      attestation: 'none',
      timeout: PASSKEY_WAIT_MS,
    },
  });
  const r = credential.response;
  const registration = {
    id: credential.id,
    rawId: b64url(new Uint8Array(credential.rawId)),
    type: 'public-key',
    response: {
      clientDataJSON: b64url(new Uint8Array(r.clientDataJSON)),
      attestationObject: b64url(new Uint8Array(r.attestationObject)),
    },
    clientExtensionResults: {},
  };
  $('enrolment').value = JSON.stringify(registration);
  $('enrolment-fingerprint').textContent = await credentialFingerprint(registration.rawId);
  $('enrolment-origin').textContent = location.origin;
  $('enrolment-done').hidden = false;
  $('enrol-status').textContent = '';
  $('enrolment').focus();
}

// --- the list ----------------------------------------------------------------------

async function poll() {
  if (!page.me || page.polling) return; // one request at a time, however slow the network
  page.polling = true;
  let answer;
  try {
    answer = await api('GET', '/api/approvals');
  } finally {
    page.polling = false;
  }
  if (answer.status === 401) {
    signOut(`Your session ended (${answer.data.reason}). Sign in again with your key.`);
    return;
  }
  if (answer.status !== 200) {
    showGateStatus('The console is not answering; what you see may be out of date.');
    return;
  }
  page.offsetMs = answer.data.server_now_ms - Date.now();
  showGateStatus(answer.data.gate_answering
    ? '' : 'The gate is not answering; states may be out of date and decisions cannot be sent.');
  const fresh = [];
  page.approvals = new Map(answer.data.approvals.map((a) => [a.approval_id, a]));
  for (const a of page.approvals.values()) {
    if (!page.known.has(a.approval_id)) {
      page.known.add(a.approval_id);
      if (a.state === 'pending') fresh.push(a);
    }
  }
  if (fresh.length) {
    $('announcer').textContent =
      `${fresh.length} new held action${fresh.length > 1 ? 's' : ''}: ${fresh.map(title).join('; ')}`;
  }
  renderList();
  if (page.selected) renderLive();
  openLinked();
  previewOpen();
}

/** The notification's link, `/?approval=<id>`: after sign-in and the first
 *  list, open that approval if it is one this approver is shown. The id is only looked
 *  up in that list, never written into the page; any other id gets a plain message. */
function openLinked() {
  const wanted = new URLSearchParams(location.search).get('approval');
  if (wanted === null || page.linkHandled) return;
  page.linkHandled = true;
  if (page.approvals.has(wanted)) {
    openDetail(wanted);
    return;
  }
  $('link-note').textContent = 'The approval in your link is not in your list: it may have been '
    + 'decided and removed, it may not be for your tenants or roles, or the link is damaged.';
  $('link-note').hidden = false;
}

function showGateStatus(text) {
  $('gate-status').textContent = text;
  $('gate-status').hidden = !text;
}

function title(a) {
  return `${a.native_tool} (${a.capability})`;
}

const KIND_WORDS = {
  electronic_filing: 'A court filing',
  email: 'An e-mail',
  messaging: 'A message',
};

/** The detail's heading in a lawyer's words: what kind of sending waits for them (the
 * tool and its capability stay under "Technical details"). */
function headingWords(a) {
  return `${KIND_WORDS[a.channel] || 'An action'}, held for your approval`;
}

function sortKey(a) {
  // Open ones first, the one that expires first at the top; then closed ones, newest first.
  return isOpen(a) || IN_PROGRESS.has(a.state) ? [0, a.expires_at_ms] : [1, -a.created_at_ms];
}

function renderList() {
  const list = $('approvals');
  const items = [...page.approvals.values()].sort((x, y) => {
    const [a, b] = [sortKey(x), sortKey(y)];
    return a[0] - b[0] || a[1] - b[1] || (x.approval_id < y.approval_id ? -1 : 1);
  });
  const wanted = new Set(items.map((a) => a.approval_id));
  for (const li of [...list.children]) if (!wanted.has(li.dataset.id)) li.remove();
  items.forEach((a, index) => {
    let li = list.querySelector(`li[data-id="${CSS.escape(a.approval_id)}"]`);
    if (!li) li = makeItem(a);
    updateItem(li, a);
    if (list.children[index] !== li) list.insertBefore(li, list.children[index] || null);
  });
  renderMatterFilter();
  const shown = items.filter((a) => inFilter(a)).length;
  $('empty').hidden = items.length > 0;
  $('filtered-out').hidden = shown > 0 || items.length === 0;
}

function makeItem(a) {
  const button = el('button', { type: 'button', class: 'item' },
    el('span', { class: 'title' }),
    el('span', { class: 'where' }),
    el('span', { class: 'matter' }),
    el('span', { class: 'asker' }),
    el('span', { class: 'when' },
      el('span', { class: 'state' }), ' ', el('span', { class: 'countdown' }), ' ',
      el('span', { class: 'until' })));
  button.addEventListener('click', () => openDetail(a.approval_id));
  const li = el('li', {}, button);
  li.dataset.id = a.approval_id;
  return li;
}

function updateItem(li, a) {
  const open = isOpen(a);
  const shown = page.previews.get(a.approval_id);
  const words = shown ? listWords(a, shown) : {
    what: title(a),
    where: `${a.tenant_id} · ${a.channel} (${a.locality})`,
    matter: '',
    asker: '',
  };
  li.hidden = !inFilter(a);
  li.classList.toggle('closed', !open && !IN_PROGRESS.has(a.state));
  li.dataset.state = open ? 'pending' : shownState(a).replace(/ /g, '_');
  li.dataset.matter = shown ? shown.view.binding.matter_id : '';
  li.querySelector('.title').textContent = words.what;
  li.querySelector('.where').textContent = words.where;
  li.querySelector('.matter').textContent = words.matter;
  li.querySelector('.matter').hidden = !words.matter;
  li.querySelector('.asker').textContent = words.asker;
  li.querySelector('.asker').hidden = !words.asker;
  li.querySelector('.state').textContent = shownState(a);
  li.querySelector('.countdown').textContent = open ? formatLeft(timeLeft(a)) : '';
  li.querySelector('.until').textContent = open ? `(until ${formatExpiry(a.expires_at_ms)})` : '';
  li.querySelector('button').setAttribute('aria-current', String(page.selected === a.approval_id));
}

// --- the list in words ----------------------------------------------------------------
// An announcement names no content, matter or person (ARCHITECTURE.md, "Exact-action
// approval"), so five held filings would all read "court_efile (external.transmit)".
// Once signed in, this page asks the gate to show each open entry, with a signed show
// request as opening it does (the gate alone decides what this approver may see, and a
// show changes nothing), and words the entry from the answer: what (the document), where
// (court or recipient, by the directory's names), which matter and client, who asked.
// An entry the gate does not show keeps the announcement's words. The detail shows the
// same view again when it is opened, and checks it there; nothing here is signed.

/** A show request, timed by the console's clock as the track and re-request ones are
 *  (a laptop whose clock is a minute off still sees what is held). */
function showRequest(id) {
  return {
    schema: 'smf.approval-show/1',
    approval_id: id,
    resolver_id: page.me.principal,
    requested_at_ms: now(),
  };
}

/** The document's name, as the list says what a held action sends. */
function documentWords(view) {
  const files = attachmentsIn(view.arguments_json).map((a) => a.filename || a.arg);
  const line = (view.content || '').split('\n')[0].trim();
  const summary = line.length > 120 ? `${line.slice(0, 119)}…` : line;
  if (summary && files.length) return `${summary} (${files.join(', ')})`;
  return summary || files.join(', ') || view.native_tool;
}

function matterWords(display, view) {
  const m = display && display.matter;
  const id = view.binding.matter_id;
  if (!m || !m.in_directory || m.id !== id) return `Matter ${id} (${NOT_IN_DIRECTORY})`;
  return `${m.name} · Client: ${m.client}`;
}

function listWords(a, shown) {
  const { view, display } = shown;
  return {
    what: documentWords(view),
    where: `To ${destinationWords(display, view)} · ${a.channel}`,
    matter: matterWords(display, view),
    asker: `Asked by ${view.binding.actor_id}`,
  };
}

/** Show each open entry not yet shown, one at a time; the list is worded as answers come. */
async function previewOpen() {
  if (!page.me || page.previewing) return;
  page.previewing = true;
  try {
    for (const a of [...page.approvals.values()]) {
      if (!page.me) return;
      if (!isOpen(a) || page.previews.has(a.approval_id)) continue;
      const me = page.me;
      const answer = await api('POST', '/api/show', await signRead(me, SHOW_TYPE, showRequest(a.approval_id)));
      if (page.me !== me) return; // signed out meanwhile: nothing of it is kept
      if (answer.data.ok) {
        page.previews.set(a.approval_id, { view: answer.data.view, display: answer.data.display || null });
        renderList();
      } else if (!RETRYABLE.has(answer.data.reason)) {
        page.previews.set(a.approval_id, null); // refused: the announcement's words stay
      }
    }
  } finally {
    page.previewing = false;
  }
}

function inFilter(a) {
  if (!page.matter) return true;
  const shown = page.previews.get(a.approval_id);
  return Boolean(shown) && shown.view.binding.matter_id === page.matter;
}

/** The matter filter's choices: every matter the gate has shown an entry of. */
function renderMatterFilter() {
  const select = $('matter-filter');
  const matters = new Map();
  for (const shown of page.previews.values()) {
    if (!shown) continue;
    const m = shown.display && shown.display.matter;
    const id = shown.view.binding.matter_id;
    matters.set(id, m && m.in_directory && m.id === id ? `${m.name} (${m.client})` : id);
  }
  if (page.matter && !matters.has(page.matter)) matters.set(page.matter, page.matter);
  const wanted = [['', 'All matters'], ...[...matters.entries()].sort((x, y) => x[1].localeCompare(y[1]))];
  const have = [...select.options].map((o) => [o.value, o.textContent]);
  if (JSON.stringify(have) !== JSON.stringify(wanted)) {
    select.replaceChildren(...wanted.map(([value, text]) => el('option', { value }, text)));
    select.value = page.matter;
  }
  $('matter-filter-row').hidden = matters.size < 2 && !page.matter;
}

function tick() {
  for (const li of $('approvals').children) {
    const a = page.approvals.get(li.dataset.id);
    if (a) updateItem(li, a);
  }
  if (page.selected) renderLive();
}

// --- one approval ------------------------------------------------------------------

// Why the approval is required, in words. The gate sends each rule as the
// release that made the decision words it (smf_assurance/subjects/approvals.py RuleShown) and each
// reason code with the words of its one table (smf_assurance/core/explanation.py
// REASON_WORDS). All of it is set as text, never as HTML.
const RULE_NOT_DESCRIBED = 'no description in the release'; // smf_assurance/subjects/approvals.py RULE_NOT_DESCRIBED

function rulesShown(rules) {
  return el('ul', { class: 'rules' }, ...rules.map((rule) => (rule.title == null
    ? el('li', { class: 'rule' }, el('code', {}, rule.rule_id), ` — ${RULE_NOT_DESCRIBED}`)
    : el('li', { class: 'rule' },
      el('strong', { class: 'rule-title' }, rule.title),
      el('p', { class: 'rule-statement' }, rule.statement || ''),
      el('p', { class: 'rule-citation' }, 'Citation: ', el('cite', {}, rule.citation || '')),
      el('code', { class: 'rule-id' }, rule.rule_id)))));
}

function reasonsShown(reasons) {
  return el('ul', { class: 'reasons' }, ...reasons.map((reason) => (reason.words
    ? el('li', {}, `${reason.words[0].toUpperCase()}${reason.words.slice(1)} `, el('code', {}, reason.code))
    : el('li', {}, el('code', {}, reason.code)))));
}

function fact(term, value, asCode = false) {
  return [el('dt', {}, term), el('dd', {}, asCode ? el('code', {}, value) : value)];
}

async function openDetail(id) {
  const a = page.approvals.get(id);
  if (!a || !page.me) return;
  $('link-note').hidden = true;
  Object.assign(page, {
    selected: id, view: null, display: null, checks: null, closedReason: null, decided: null, final: false,
  });
  $('detail').hidden = false;
  $('detail-title').textContent = headingWords(a);
  $('expiry-live').textContent = '';
  $('answer').textContent = '';
  $('answer').removeAttribute('data-kind');
  $('reviewable').hidden = true;
  $('closed-note').hidden = true;
  $('outcome-box').hidden = true;
  $('self-warning').hidden = true; // who asked is known once the gate shows the binding
  $('technical').open = false; // closed by default for each approval opened
  // The last approval's checks say nothing of this one: no result until its own are made.
  delete $('digest-check').dataset.ok;
  $('digest-check').textContent = '';
  closeSteps();
  $('deny-form').reset();
  $('deny-send').disabled = true;
  $('deny-error').textContent = '';
  renderFacts(a, null);
  renderList();
  renderLive();
  $('detail-title').focus();
  const answer = await api('POST', '/api/show', await signRead(page.me, SHOW_TYPE, showRequest(id)));
  if (page.selected !== id) return; // the approver moved on meanwhile
  if (!answer.data.ok) {
    page.closedReason = answer.data.reason;
    const [label, why] = REFUSALS[answer.data.reason] || [answer.data.reason, 'the gate refused to show it'];
    $('closed-note').textContent = `Not shown: ${label}. ${why} (${answer.data.reason}).`;
    $('closed-note').hidden = false;
    renderLive();
    return;
  }
  page.view = answer.data.view;
  page.display = answer.data.display || null;
  $('self-warning').hidden = page.view.binding.actor_id !== page.me.approver_id;
  page.checks = await checkView(page.view, a.channel);
  renderFacts(a, page.view);
  renderReview();
  renderLive();
}

// The lawyer's view first: what it sends, where, for which matter, who
// asked, why it is held (the rules in words), what Allow once does, and until when.
// Codes, arguments and digests are under "Technical details", closed by default and
// still on the page for the record; the checks of the binding run either way.
function renderFacts(a, view) {
  const rows = [
    fact('What it sends', view ? documentWords(view) : title(a)),
    fact('Destination', view
      ? destinationShown(page.display, view, a)
      : `${a.channel}, ${a.locality}`),
    // The announcement names no matter or person: the gate shows them
    // to an entitled approver with the binding.
    fact('Matter', view ? matterShown(page.display, view) : '(shown once opened)'),
    fact('Requested by', view ? view.binding.actor_id : '(shown once opened)'),
    fact('Why it is held', view && view.rules ? rulesShown(view.rules) : '(shown once opened)'),
    fact('What Allow once does', view ? allowWords(view, a) : '(shown once opened)'),
    fact('Expires', formatExpiry(a.expires_at_ms)),
  ];
  $('facts').replaceChildren(...rows.flat());
  const technical = [
    fact('Capability', a.capability),
    fact('Tool', a.native_tool),
    fact('Tenant', view ? `${a.tenant_id} · ${view.binding.organization_id}` : a.tenant_id),
    fact('Required role', a.required_roles.join(', ')),
    fact('Rules', a.rule_ids.join(', ') || '(none named)', true),
    fact('Reasons', view && view.reasons ? reasonsShown(view.reasons) : a.reason_codes.join(', ') || '(none)'),
  ];
  if (view) technical.push(fact('Arguments', argumentsShown(view.arguments_json), true));
  if (view) technical.push(fact('Binding digest', page.checks.computedDigest, true));
  $('technical-facts').replaceChildren(...technical.flat());
}

/** What an allow does, in words: the one action shown, once, to that destination. */
function allowWords(view, a) {
  return `Sends what is shown here to ${destinationWords(page.display, view)} (${a.channel}), `
    + 'once, exactly as shown. The approval is bound to this action: it cannot send anything '
    + 'else, or send this again. It lapses if nobody decides before it expires.';
}

function renderReview() {
  const view = page.view;
  const checks = page.checks;
  $('content').textContent = view.content;
  const ok = allChecksPass(checks);
  const summary = $('digest-check');
  summary.dataset.ok = String(ok);
  summary.textContent = ok
    ? '✓ What is shown here is exactly what Allow once approves (checked in this browser)'
    : '✗ Mismatch: what is shown is not what the binding covers. Do not allow it.';
  if (!ok) $('technical').open = true; // a failed check is shown, not folded away
  const line = (passed, text) => el('li', { class: passed ? 'ok' : 'bad' },
    `${passed ? '✓ matches' : '✗ DOES NOT MATCH'}: ${text}`);
  $('checks').replaceChildren(
    line(checks.content, 'SHA-256 of the content shown = content hash in the binding'),
    line(checks.arguments, 'canonical hash of the arguments shown = argument hash in the binding'),
    line(checks.destination, 'hash of the destination shown = destination hash in the binding'),
    line(checks.digest, 'digest recomputed here from the binding = the gate\'s binding digest'),
    ...checks.attachments.map((a) => line(a.ok,
      `SHA-256 of ${a.filename || a.arg} computed here = its digest in the bound arguments`)),
  );
  renderAttachments(checks.attachments);
  $('reviewable').hidden = false;
}

function renderLive() {
  const a = page.approvals.get(page.selected);
  if (!a) return;
  $('detail-state').textContent = shownState(a);
  let left = null;
  if (a.state === 'pending') left = timeLeft(a);
  else if (a.state === 'expired') left = 0;
  $('detail-countdown').textContent = left === null ? '' : formatLeft(left);
  const spoken = left === null ? '' : announceLeft(left);
  if ($('expiry-live').textContent !== spoken) $('expiry-live').textContent = spoken;
  const decidable = Boolean(page.view) && page.view.state === 'pending' && isOpen(a)
    && !page.decided && !page.final;
  $('allow').disabled = !(decidable && allChecksPass(page.checks));
  $('deny').disabled = !decidable;
  if (!decidable && openStep()) closeSteps();
  let note = '';
  if (page.decided) note = 'Your decision was accepted; no other can be sent.';
  else if (page.final) note = 'No decision can be sent: see the gate\'s answer below.';
  else if (page.view && !decidable) note = `No decision can be sent: this approval is ${shownState(a)}.`;
  else if (page.view && !allChecksPass(page.checks)) note = 'Allow once is off: the checks above failed.';
  $('decision-note').textContent = note;
  if (page.closedReason === 'approval_closed') {
    $('closed-note').textContent =
      `Closed (${shownState(a)}): the gate has purged its content; nothing can be decided.`;
  }
  if (page.decided) renderOutcome(a);
}

function renderOutcome(a) {
  const steps = page.decided.decision === 'deny'
    ? ['denied']
    : ['approved', 'executing', ...(FINISHED.has(a.state) ? [a.state] : [])];
  $('outcome').replaceChildren(...steps.map((state, index) => {
    const item = el('li', {}, OUTCOMES[state] || state.replace(/_/g, ' '));
    item.dataset.state = state;
    item.dataset.current = String(index === steps.length - 1);
    return item;
  }));
  $('order-line').textContent = page.decided.order_id ? `Order ${page.decided.order_id}` : '';
  showReceipt(a);
  $('outcome-box').hidden = false;
}

// --- the tenant directory's names (the action as a lawyer reads it) --------------------
// The console's server looks the bound ids up in the operator's tenant directory
// (smf_assurance/approver/directory.py) and sends the names beside the view. The raw id
// is always shown with them: it is what the checks below compare with the binding. An id
// the directory does not hold is shown raw and marked so, never guessed.

const NOT_IN_DIRECTORY = 'not in the directory';

function unlisted(id) {
  return el('span', { class: 'unlisted' }, el('code', {}, id || '(none)'), ` (${NOT_IN_DIRECTORY})`);
}

function destinationShown(display, view, a) {
  const d = display && display.destination;
  const where = el('span', { class: 'muted' }, ` · ${a.channel}, ${a.locality}`);
  if (!d || !d.in_directory || d.id !== view.destination_address) {
    return el('span', { id: 'destination-shown' }, unlisted(view.destination_address), where);
  }
  if (d.kind === 'recipient') {
    return el('span', { id: 'destination-shown' },
      el('strong', { class: 'recipient-name' }, d.name), ' <', el('code', {}, d.id), '>', where);
  }
  const caseLine = d.caption
    ? el('span', { class: 'case' }, el('cite', { class: 'caption' }, d.caption),
      el('span', { class: 'docket' }, `Docket No. ${d.docket}`))
    : el('span', { class: 'case unlisted' }, `no case for this matter at this court (${NOT_IN_DIRECTORY})`);
  return el('span', { id: 'destination-shown', class: 'court' },
    el('strong', { class: 'court-name' }, d.name), ' ', el('code', {}, d.id), where, caseLine);
}

function matterShown(display, view) {
  const m = display && display.matter;
  if (!m || !m.in_directory || m.id !== view.binding.matter_id) {
    return el('span', { id: 'matter-shown' }, unlisted(view.binding.matter_id));
  }
  return el('span', { id: 'matter-shown', class: 'matter' },
    el('strong', { class: 'matter-name' }, m.name), ' ', el('code', {}, m.id),
    el('span', { class: 'client' }, `Client: ${m.client}`));
}

function destinationWords(display, view) {
  const d = display && display.destination;
  const raw = view.destination_address || '(no address)';
  if (!d || !d.in_directory || d.id !== view.destination_address) return `${raw} (${NOT_IN_DIRECTORY})`;
  if (d.kind === 'recipient') return `${d.name} <${raw}>`;
  return d.caption ? `${d.name} (${raw}), ${d.caption}, Docket No. ${d.docket}` : `${d.name} (${raw})`;
}

// --- the documents the action sends (attachments shown and bound) -----------------------
// The runtime puts each document's bytes in an argument with their SHA-256
// (smf_assurance/subjects/attachments.py), so the argument hash in the binding covers
// them. Here each one's SHA-256 is recomputed with SubtleCrypto from the bytes about to
// be shown and compared with the digest in those arguments; only bytes that match are
// rendered (a PDF in a frame from a blob made of exactly those bytes, text as text), and
// any mismatch keeps Allow once off.

const ATTACHMENT_SCHEMA = 'smf.attachment/1';
const RENDERED_TYPES = new Set(['application/pdf', 'text/plain']);

function attachmentsIn(argumentsJson) {
  let args;
  try {
    args = JSON.parse(argumentsJson);
  } catch {
    return [];
  }
  if (!args || typeof args !== 'object' || Array.isArray(args)) return [];
  return Object.keys(args).sort()
    .filter((name) => args[name] && typeof args[name] === 'object' && args[name].schema === ATTACHMENT_SCHEMA)
    .map((name) => ({ ...args[name], arg: name }));
}

/** Each attachment, its bytes, and whether their SHA-256 is the digest it carries. */
export async function checkAttachments(argumentsJson) {
  return Promise.all(attachmentsIn(argumentsJson).map(async (a) => {
    let bytes = null;
    let computed = null;
    try {
      bytes = b64decode(a.data_b64);
      computed = await sha256Identity(bytes);
    } catch {
      bytes = null; // not base64: it cannot match anything the gate bound
    }
    const ok = computed !== null && computed === a.sha256 && RENDERED_TYPES.has(a.media_type);
    return { arg: a.arg, filename: a.filename, mediaType: a.media_type, sha256: a.sha256, computed, ok,
      bytes: ok ? bytes : null };
  }));
}

/** The arguments as JSON, each document's bytes replaced by a pointer to where they are shown. */
function argumentsShown(argumentsJson) {
  try {
    const args = JSON.parse(argumentsJson);
    for (const a of attachmentsIn(argumentsJson)) {
      args[a.arg] = { ...args[a.arg], data_b64: '(the document\'s bytes: shown under "Documents to be sent")' };
    }
    return JSON.stringify(args);
  } catch {
    return argumentsJson;
  }
}

function attachmentShown(a) {
  const size = a.bytes ? ` · ${a.bytes.length.toLocaleString('en-US')} bytes` : '';
  const figure = el('figure', { class: 'attachment', 'data-arg': a.arg, 'data-ok': String(a.ok) },
    el('figcaption', {}, el('strong', {}, a.filename || a.arg), ` · ${a.mediaType}${size}`));
  if (!a.ok) {
    figure.append(el('p', { class: 'error', role: 'alert' },
      `✗ Not shown: the SHA-256 of ${a.filename || a.arg} computed here does not match the digest `
      + 'the approval is bound to. Do not allow it.'));
    return figure;
  }
  if (a.mediaType === 'application/pdf') {
    const pages = el('div', { class: 'pages', 'data-state': 'drawing' },
      el('p', { class: 'muted' }, 'Drawing the pages…'));
    figure.append(pages);
    drawPages(a, pages);
  } else {
    figure.append(el('pre', { class: 'content', tabindex: '0', 'aria-label': a.filename },
      new TextDecoder('utf-8').decode(a.bytes)));
  }
  figure.append(el('p', { class: 'muted digest' }, el('code', {}, a.computed)));
  return figure;
}

// A PDF's pages are drawn here by pdf.js, which the console serves at /vendor/ only as
// the pinned files (smf_assurance/approver/console/renderer.py), from the very bytes whose
// SHA-256 was just checked; no script of the document runs (pdf.js draws, it does not
// execute a PDF's JavaScript) and no WebAssembly is used. The pages are one group in
// the keyboard order, one Tab stop, named by the file and its page count. Where the
// console serves no renderer, or pdf.js cannot read the file whole, the browser's own
// viewer shows the same bytes in a frame, as before, and the page says so.

let rendererLoad = null;

function pdfRenderer() {
  if (rendererLoad === null) {
    rendererLoad = import('/vendor/pdf.min.mjs')
      .then((pdfjs) => {
        pdfjs.GlobalWorkerOptions.workerSrc = '/vendor/pdf.worker.min.mjs';
        return pdfjs;
      })
      .catch(() => null);
  }
  return rendererLoad;
}

const PAGE_SCALE = 2; // drawn at twice the PDF's size, shown at the column's width
const MAX_PAGES_DRAWN = 200;

async function drawPages(a, holder) {
  const pdfjs = await pdfRenderer();
  let canvases = null;
  let count = 0;
  if (pdfjs) {
    try {
      const task = pdfjs.getDocument({
        data: a.bytes.slice(), useWasm: false, enableXfa: false, stopAtErrors: true,
      });
      const doc = await task.promise;
      count = doc.numPages;
      canvases = [];
      for (let n = 1; n <= Math.min(count, MAX_PAGES_DRAWN); n += 1) {
        const pdfPage = await doc.getPage(n);
        const viewport = pdfPage.getViewport({ scale: PAGE_SCALE });
        const canvas = el('canvas', {
          class: 'pdf-page', width: String(Math.ceil(viewport.width)),
          height: String(Math.ceil(viewport.height)), role: 'img', 'aria-label': `Page ${n} of ${count}`,
        });
        await pdfPage.render({ canvas, viewport }).promise;
        canvases.push(canvas);
      }
      await task.destroy();
    } catch (error) {
      canvases = null;
      holder.dataset.reason = `${error?.name || 'Error'}: ${error?.message || ''}`.slice(0, 200);
    }
  } else {
    holder.dataset.reason = 'renderer_unavailable';
  }
  if (!holder.isConnected) return; // another approval was opened meanwhile
  if (canvases) {
    const more = count > canvases.length
      ? [el('p', { class: 'muted' }, `Pages ${canvases.length + 1} to ${count} are not drawn here.`)] : [];
    holder.replaceChildren(...canvases, ...more);
    holder.setAttribute('role', 'group');
    holder.setAttribute('tabindex', '0');
    holder.setAttribute('aria-label', `${a.filename || a.arg}: ${count} page${count === 1 ? '' : 's'}, `
      + 'drawn from the checked bytes');
    holder.dataset.state = 'drawn';
    return;
  }
  const url = URL.createObjectURL(new Blob([a.bytes], { type: 'application/pdf' }));
  page.blobUrls.push(url);
  // The viewer's open parameters: the page at the frame's width, no thumbnail pane.
  holder.replaceChildren(
    el('p', { class: 'muted' }, 'Shown by your browser\'s own PDF viewer (the pages could not be drawn here).'),
    el('iframe', {
      class: 'pdf', src: `${url}#navpanes=0&view=FitH`, title: `${a.filename} (PDF, as it will be filed)`,
    }),
  );
  holder.dataset.state = 'viewer';
}

function renderAttachments(attachments) {
  for (const url of page.blobUrls.splice(0)) URL.revokeObjectURL(url);
  $('attachments').replaceChildren(...attachments.map(attachmentShown));
  $('attachments-box').hidden = attachments.length === 0;
}

// --- the confirm step and the deny form -------------------------------------

function openStep() {
  if (!$('allow-confirm').hidden) return 'allow';
  if (!$('deny-form').hidden) return 'deny';
  return null;
}

function closeSteps() {
  $('allow-confirm').hidden = true;
  $('deny-form').hidden = true;
}

function actionLine() {
  const a = page.approvals.get(page.selected);
  const where = a ? ` (${a.channel}, ${a.locality})` : '';
  return `${page.view.native_tool}, sending the content shown above to `
    + `${destinationWords(page.display, page.view)}${where}.`;
}

function askAllow() {
  if (!page.view || $('allow').disabled) return;
  closeSteps();
  $('allow-confirm-text').textContent = `Allow once: ${actionLine()} It runs once and cannot be undone.`;
  $('allow-confirm').hidden = false;
  $('allow-confirm-title').focus();
}

function askDeny() {
  if (!page.view || $('deny').disabled) return;
  closeSteps();
  $('deny-form-text').textContent = `Deny: ${actionLine()} Nothing will be sent.`;
  $('deny-error').textContent = '';
  $('deny-form').hidden = false;
  $('deny-form-title').focus();
}

function cancelStep() {
  const step = openStep();
  closeSteps();
  $(step === 'deny' ? 'deny' : 'allow').focus();
}

function chosenReason() {
  const checked = $('deny-form').querySelector('input[name="deny-reason"]:checked');
  return checked ? checked.value : null;
}

function sendDenial(event) {
  event.preventDefault();
  const reason = chosenReason();
  if (!reason) {
    $('deny-error').textContent = 'Choose a reason: a denial cannot be sent without one.';
    $('deny-form').querySelector('input[name="deny-reason"]').focus();
    return;
  }
  const note = $('deny-note').value;
  const problem = note.trim() ? noteProblem(note) : '';
  if (problem) {
    $('deny-error').textContent = problem;
    $('deny-note').focus();
    return;
  }
  closeSteps();
  decide('deny', reason, note.trim() ? note : null);
}

async function decide(decision, denyReason = null, note = null) {
  const id = page.selected;
  if (!page.view || (decision === 'allow-once' && !allChecksPass(page.checks))) return;
  if (decision === 'deny' && !denyReason) return; // never a denial without a closed reason
  $('allow').disabled = true;
  $('deny').disabled = true;
  const answer = $('answer');
  answer.removeAttribute('data-kind');
  answer.textContent = 'Signing your decision in this browser and sending it…';
  const resolution = {
    schema: 'smf.approval-resolution/1',
    approval_id: id,
    decision,
    binding_digest: page.checks.computedDigest, // the digest of what was shown, computed here
    resolver_id: page.me.principal,
    resolved_at_ms: Date.now(),
  };
  if (decision === 'deny') resolution.deny_reason = denyReason;
  if (decision === 'deny' && note) resolution.note = note;
  let signed;
  try {
    signed = await signDecision(page.me, RESOLUTION_TYPE, resolution);
  } catch {
    // the person cancelled their passkey, or it did not answer: nothing was sent
    $('allow').disabled = false;
    $('deny').disabled = false;
    answer.dataset.kind = 'refused';
    answer.textContent = 'Not sent: your passkey did not sign the decision. Nothing was decided.';
    answer.focus();
    return;
  }
  const sent = await api('POST', '/api/resolve', signed);
  if (page.selected !== id) return;
  if (!sent.data.ok) {
    page.final = !RETRYABLE.has(sent.data.reason);
    answer.dataset.kind = 'refused';
    answer.textContent = refusalText([sent.data.reason], '');
  } else if (sent.data.reply.accepted) {
    const reply = sent.data.reply;
    page.decided = { decision, order_id: reply.order_id };
    const a = page.approvals.get(id);
    if (a) a.state = reply.state;
    answer.dataset.kind = 'accepted';
    answer.textContent = decision === 'deny'
      ? `Accepted: your denial is recorded (${reply.reason_codes.join(', ')}); nothing will be sent.`
      : `Accepted: allowed once. The gate claimed it (${reply.state}).`;
  } else {
    const reply = sent.data.reply;
    page.final = true;
    answer.dataset.kind = 'refused';
    answer.textContent = refusalText(reply.reason_codes, reply.state);
  }
  renderList();
  renderLive();
  answer.focus(); // the pressed button is now disabled: keep the keyboard user on the answer
}

function backToList() {
  const id = page.selected;
  page.selected = null;
  $('detail').hidden = true;
  renderList();
  const li = id && $('approvals').querySelector(`li[data-id="${CSS.escape(id)}"] button`);
  (li || $('board-title')).focus();
}

// --- the requester's view and the connector's receipt ----------------------
// The console names candidate ids (what is held for this person's tenants); the page
// signs a track request for them and the gate answers only for the person's own
// requests and those they may resolve. Nothing here is taken from the console alone.

/** Ask the gate, signed by this person, where these approvals stand. */
async function track(ids) {
  const request = {
    schema: 'smf.approval-track/1',
    viewer_id: page.me.principal,
    approval_ids: ids,
    requested_at_ms: now(), // the console's clock, which the gate keeps too
  };
  return api('POST', '/api/track', await signRead(page.me, TRACK_TYPE, request));
}

async function pollRequests() {
  if (!page.me || page.requestsPolling) return;
  page.requestsPolling = true;
  try {
    const candidates = await api('GET', '/api/requests');
    if (candidates.status !== 200) return;
    const ids = candidates.data.candidates.slice(-256);
    const answer = ids.length ? await track(ids) : { data: { ok: true, approvals: [] } };
    if (!answer.data.ok) {
      page.requestsTrouble = true;
      $('requests-status').textContent =
        `Where your requests stand cannot be shown now (${answer.data.reason}).`;
      return;
    }
    if (page.requestsTrouble) $('requests-status').textContent = '';
    page.requestsTrouble = false;
    page.requests = new Map(answer.data.approvals
      .filter((r) => r.relation === 'requester').map((r) => [r.approval_id, r]));
    for (const r of answer.data.approvals) if (r.receipt) page.receipts.set(r.approval_id, r.receipt);
    renderRequests();
  } finally {
    page.requestsPolling = false;
  }
}

/** One request's standing in words: the state, a denial's reasons, the receipt. */
export function requestStanding(r, nowMs) {
  switch (r.state) {
    case 'pending':
      return r.expires_at_ms > nowMs
        ? `Waiting for an approver, ${formatLeft(r.expires_at_ms - nowMs)}`
        : 'Expired: nothing was sent';
    case 'denied':
      return `Denied: ${(r.reason_words || []).join('; ') || 'no reason given'}. Nothing was sent`;
    case 'consumed':
      return r.receipt
        ? `Done: the connector confirmed it. Receipt: ${r.receipt}`
        : 'Done: the connector confirmed it (it gave no receipt)';
    default:
      return OUTCOMES[r.state] || r.state.replace(/_/g, ' ');
  }
}

/** A request in the requester's words: what kind of sending, then the tool by name. */
function requestTitle(r) {
  if (!r.native_tool) return 'A held action';
  return `${KIND_WORDS[r.channel] || 'An action'} (${r.native_tool})`;
}

function isExpired(r) {
  return r.state === 'expired' || (r.state === 'pending' && r.expires_at_ms <= now());
}

/** Updated in place (not rebuilt), so a keyboard user's focus on "Ask again" survives
 *  each refresh. */
function renderRequests() {
  const list = $('requests-list');
  const items = [...page.requests.values()].sort((x, y) => y.created_at_ms - x.created_at_ms);
  const wanted = new Set(items.map((r) => r.approval_id));
  for (const li of [...list.children]) if (!wanted.has(li.dataset.id)) li.remove();
  items.forEach((r, index) => {
    let li = list.querySelector(`li[data-id="${CSS.escape(r.approval_id)}"]`);
    if (!li) li = makeRequest(r);
    li.dataset.state = isExpired(r) ? 'expired' : r.state;
    if (r.receipt) li.dataset.receipt = r.receipt;
    li.querySelector('.standing').textContent = requestStanding(r, now());
    li.querySelector('.again').hidden = r.state !== 'expired'; // as the gate says, not the clock
    if (list.children[index] !== li) list.insertBefore(li, list.children[index] || null);
  });
  $('requests-empty').hidden = items.length > 0;
}

function makeRequest(r) {
  const again = el('button', { type: 'button', class: 'again' }, 'Ask again');
  again.setAttribute('aria-label', `Ask again: ${requestTitle(r)}, asked ${formatExpiry(r.created_at_ms)}`);
  again.addEventListener('click', () => askAgain(r.approval_id, again));
  const li = el('li', { class: 'request' },
    el('span', { class: 'title' }, requestTitle(r)),
    el('span', { class: 'meta' }, `${r.tenant_id} · asked ${formatExpiry(r.created_at_ms)}`),
    el('span', { class: 'standing' }),
    again);
  li.dataset.id = r.approval_id;
  return li;
}

/** What came of an accepted re-request, as the gate answered it (the verdict of a new
 *  proposal of the same action it decided while it waited): never "asked again" when no
 *  runtime proposed anything. The expired request stays expired either way. */
function askedAgainWords(reply) {
  if (reply.proposed_again === 'held') {
    return 'Asked again: the agent proposed it anew, and it is held for approval again '
      + '(a new request in this list). The expired one stays expired.';
  }
  if (reply.proposed_again === 'allow' || reply.proposed_again === 'deny') {
    const decided = reply.proposed_again === 'allow' ? 'allowed' : 'denied';
    return `Asked again: the agent proposed it anew, and the rules in force now ${decided} `
      + 'it without an approval. The expired one stays expired.';
  }
  const seconds = Math.round((reply.waited_ms || 0) / 1000);
  return `Not proposed again: no agent proposed this action anew within ${seconds} s. `
    + 'The agent no longer holds it (the Hermes and OpenClaw adapters keep none): ask the '
    + 'agent to do it again. The expired one stays expired.';
}

/** An expired request is asked again as a NEW proposal (a new binding and
 *  approval id, decided from the start), never by reviving the old one; the page signs
 *  the request with this person's key and the gate checks it is theirs and expired. */
async function askAgain(id, button) {
  if (!page.me) return;
  button.disabled = true;
  const request = {
    schema: 'smf.approval-rerequest/1',
    approval_id: id,
    requester_id: page.me.principal,
    requested_at_ms: now(),
  };
  const sent = await api('POST', '/api/rerequest', await signRead(page.me, REREQUEST_TYPE, request));
  const reply = sent.data.ok ? sent.data.reply : null;
  if (reply && reply.accepted) {
    $('requests-status').textContent = askedAgainWords(reply);
  } else {
    button.disabled = false;
    const reason = reply ? reply.reason_codes.join(', ') : sent.data.reason;
    $('requests-status').textContent = `Not asked again (${reason}).`;
  }
  await pollRequests();
}

/** After execution, the approver sees the connector's receipt (e.g. the court's filing
 *  number) rather than only the order id; asked of the gate once the approval is consumed. */
function showReceipt(a) {
  const receipt = page.receipts.get(a.approval_id); // null: the gate said it has none
  $('receipt-line').textContent = receipt ? `Receipt from the connector: ${receipt}` : '';
  $('receipt-line').hidden = !receipt;
  if (page.receipts.has(a.approval_id) || a.state !== 'consumed') return;
  if (page.receiptAsked.has(a.approval_id)) return;
  page.receiptAsked.add(a.approval_id);
  track([a.approval_id]).then((answer) => {
    page.receiptAsked.delete(a.approval_id); // an unanswered ask is made again on the next tick
    if (!answer.data.ok) return;
    const found = answer.data.approvals.find((r) => r.approval_id === a.approval_id);
    if (found) page.receipts.set(a.approval_id, found.receipt || null);
    if (page.selected === a.approval_id && page.decided) renderOutcome(a);
  });
}

// --- wiring ------------------------------------------------------------------------

function start() {
  $('board-title').tabIndex = -1;
  $('matter-filter').addEventListener('change', (event) => {
    page.matter = event.target.value;
    renderList();
  });
  $('key-file').addEventListener('change', async (event) => {
    const input = event.target;
    const file = input.files[0];
    input.value = '';
    if (!file) return;
    try {
      await signIn(file);
    } catch (err) {
      page.me = null;
      signinStatus(`Not signed in: ${err.message}.`);
    }
  });
  $('passkey-signin').addEventListener('click', async () => {
    try {
      await signInWithPasskey($('passkey-id').value.trim());
    } catch (err) {
      page.me = null;
      signinStatus(`Not signed in: ${err.message}.`);
    }
  });
  $('passkey-enrol').addEventListener('click', async () => {
    try {
      await enrolPasskey($('passkey-id').value.trim());
    } catch (err) {
      $('enrol-status').textContent = `No passkey made: ${err.message}.`;
    }
  });
  $('sign-out').addEventListener('click', () => signOut());
  $('back').addEventListener('click', backToList);
  $('allow').addEventListener('click', askAllow);
  $('deny').addEventListener('click', askDeny);
  $('allow-yes').addEventListener('click', () => {
    closeSteps();
    decide('allow-once');
  });
  $('allow-cancel').addEventListener('click', cancelStep);
  $('deny-cancel').addEventListener('click', cancelStep);
  $('deny-form').addEventListener('submit', sendDenial);
  $('deny-form').addEventListener('change', () => {
    $('deny-send').disabled = !chosenReason();
    if (chosenReason()) $('deny-error').textContent = '';
  });
  document.addEventListener('keydown', (event) => {
    if (event.key !== 'Escape' || !page.selected) return;
    if (openStep()) cancelStep(); // Escape leaves the step first, nothing is signed
    else backToList();
  });
  if (!globalThis.isSecureContext || !crypto.subtle) {
    signinStatus('This page must be opened over HTTPS or on this machine (localhost): '
      + 'the browser signs only in a secure context.');
    $('key-file').disabled = true;
    $('passkey-signin').disabled = true;
    $('passkey-enrol').disabled = true;
  }
}

start();
