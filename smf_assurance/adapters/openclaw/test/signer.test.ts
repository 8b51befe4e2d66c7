/**
 * The confined plugin's signer client (signer.ts): a synchronous signature from a
 * signer in another process over a unix socket, checked against the key the
 * identity answer named; a refusal and a signer that is gone each throw a
 * SignerError with its reason code (the caller then blocks the call). The signer
 * here is a stand-in child process speaking smf_assurance.subjects.signer's wire; the
 * real launcher's is exercised with the real OpenClaw (tests/runtimes/test_openclaw_confined.py).
 */

import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { SigningKey } from "../dist/contract/keys.js";
import { RemoteSigner, SignerError } from "../dist/signer.js";

const SEED = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
const KEYS = fileURLToPath(new URL("../dist/contract/keys.js", import.meta.url));

/** A signer that signs any "sign" request except one whose message is "refuse-me". */
const SERVER = `
import net from "node:net";
import { SigningKey } from ${JSON.stringify(KEYS)};
const key = SigningKey.fromSeed(Buffer.from(${JSON.stringify(SEED)}, "hex"));
const server = net.createServer((socket) => {
  let buffered = "";
  socket.on("data", (chunk) => {
    buffered += chunk.toString();
    let end;
    while ((end = buffered.indexOf("\\n")) >= 0) {
      const request = JSON.parse(buffered.slice(0, end));
      buffered = buffered.slice(end + 1);
      let answer;
      if (request.op === "identity") {
        answer = { principal: "openclaw-runtime", key_id: key.keyId, public_key: key.publicBytes.toString("base64") };
      } else if (Buffer.from(request.message, "base64").toString() === "refuse-me") {
        answer = { error: "signer_payload_type_refused" };
      } else {
        answer = { signature: key.sign(Buffer.from(request.message, "base64")).toString("base64") };
      }
      socket.write(JSON.stringify(answer) + "\\n");
    }
  });
});
server.listen(process.argv[1], () => process.stdout.write("ready\\n"));
`;

async function signer(path: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, ["--input-type=module", "-e", SERVER, path], { stdio: ["ignore", "pipe", "inherit"] });
  await new Promise<void>((resolve, reject) => {
    child.stdout?.once("data", () => resolve());
    child.once("exit", (code) => reject(new Error(`signer exited ${code}`)));
  });
  return child;
}

test("a remote signature is the key's, and a refusal or a gone signer throws", async () => {
  const path = join(mkdtempSync(join(tmpdir(), "smf-signer-")), "s.sock");
  const child = await signer(path);
  const key = SigningKey.fromSeed(Buffer.from(SEED, "hex"));
  let remote: RemoteSigner;
  try {
    remote = RemoteSigner.connect(path);
    assert.equal(remote.principal, "openclaw-runtime");
    assert.equal(remote.keyId, key.keyId);
    const message = Buffer.from("DSSEv1 1 t 1 x");
    assert.deepEqual(remote.sign(message), key.sign(message));
    assert.throws(
      () => remote.sign(Buffer.from("refuse-me")),
      (error: unknown) => error instanceof SignerError && error.reasonCode === "signer_refused",
    );
  } finally {
    child.kill();
    await new Promise((resolve) => child.once("exit", resolve));
  }
  assert.throws(
    () => remote.sign(Buffer.from("DSSEv1 1 t 1 y")),
    (error: unknown) => error instanceof SignerError && error.reasonCode === "signer_unavailable",
  );
  assert.throws(
    () => RemoteSigner.connect(join(tmpdir(), "no-such-signer.sock")),
    (error: unknown) => error instanceof SignerError && error.reasonCode === "signer_unavailable",
  );
});
