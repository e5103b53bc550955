// An idempotent kafkajs producer for integration/kafkajs_test.go: it reads
// values, one per line, from stdin, sends each (acks=all, idempotent: the
// client retries with the same sequence) in order, and prints for each
// "ok <value> <offset>" or "err <value> <message>".
const readline = require('node:readline');
const { Kafka, logLevel } = require('kafkajs');

const [brokers, topic] = process.argv.slice(2);
const kafka = new Kafka({
  clientId: 'vdl-kafkajs-test',
  brokers: brokers.split(','),
  logLevel: logLevel.NOTHING,
  connectionTimeout: 1000,
  requestTimeout: 10000,
  retry: { retries: 50, initialRetryTime: 100, maxRetryTime: 2000 },
});
const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });

async function main() {
  await producer.connect();
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  for await (const value of rl) {
    try {
      const res = await producer.send({ topic, acks: -1, messages: [{ value }] });
      process.stdout.write(`ok ${value} ${res[0].baseOffset}\n`);
    } catch (e) {
      process.stdout.write(`err ${value} ${String(e.message || e).replace(/\n/g, ' ')}\n`);
    }
  }
  await producer.disconnect();
}

main().catch((e) => {
  process.stderr.write(`kafkajs producer: ${e.stack || e}\n`);
  process.exit(1);
});
