// A proxyless @grpc/grpc-js-xds client calling the greeter through an `xds:///` target, forever.
//
// The xDS bootstrap comes from GRPC_XDS_BOOTSTRAP. Every --interval-ms it calls SayHello (raw
// helloworld bytes, no generated code, no wait-for-ready) and prints one JSON line: {"ok": true,
// "reply": ...} or {"ok": false, "code": ..., "details": ...}. Stops after --seconds or when stdin
// closes, so it never outlives the test that started it.
'use strict';
const grpc = require('@grpc/grpc-js');
const xds = require('@grpc/grpc-js-xds');

const METHOD = '/helloworld.Greeter/SayHello';

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : dflt;
}

function encode1(text) {
  const raw = Buffer.from(text);
  const len = [];
  let n = raw.length;
  while (n >= 0x80) { len.push((n & 0x7f) | 0x80); n >>= 7; }
  len.push(n);
  return Buffer.concat([Buffer.from([0x0a, ...len]), raw]);
}

function field1(buf) {
  if (buf.length < 2 || buf[0] !== 0x0a) return '';
  let len = 0, shift = 0, i = 1;
  for (; i < buf.length; i++) {
    len |= (buf[i] & 0x7f) << shift;
    if (buf[i] < 0x80) { i++; break; }
    shift += 7;
  }
  return buf.subarray(i, i + len).toString('utf8');
}

xds.register();
const target = arg('target');
if (!target) { console.error('--target is required'); process.exit(2); }
const interval = Number(arg('interval-ms', '50'));
const until = Date.now() + Number(arg('seconds', '90')) * 1000;
const client = new grpc.Client(target, grpc.credentials.createInsecure());
let stopped = false;
process.stdin.on('end', () => { stopped = true; });
process.stdin.on('close', () => { stopped = true; });
process.stdin.resume();

function once() {
  if (stopped || Date.now() > until) { client.close(); process.exit(0); }
  const deadline = new Date(Date.now() + 2000);
  client.makeUnaryRequest(METHOD, (b) => b, (b) => b, encode1('proxyless'), { deadline }, (err, reply) => {
    const line = err
      ? { ok: false, code: grpc.status[err.code], details: err.details }
      : { ok: true, reply: field1(reply) };
    process.stdout.write(JSON.stringify(line) + '\n');
    setTimeout(once, interval);
  });
}
once();
