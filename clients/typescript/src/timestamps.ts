// RFC 3339 text <-> google.protobuf.Timestamp at full precision. The generated messages keep Timestamps
// as {seconds, nanos} (buf.gen.yaml: useDate=false) because a JavaScript Date holds milliseconds only.
import { Timestamp } from "./gen/google/protobuf/timestamp";

export { Timestamp };

const RFC3339 = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$/i;

/** A Timestamp from RFC 3339 text such as `2026-11-01T10:00:00.123456Z` (fractions up to nanoseconds). */
export function timestampFromIso(text: string): Timestamp {
  const match = RFC3339.exec(text);
  if (!match) {
    throw new RangeError(`not an RFC 3339 instant with a zone: ${JSON.stringify(text)}`);
  }
  const millis = Date.parse(`${match[1]}${match[3].toUpperCase()}`);
  if (Number.isNaN(millis)) {
    throw new RangeError(`not a valid instant: ${JSON.stringify(text)}`);
  }
  return { seconds: Math.floor(millis / 1000), nanos: Number((match[2] ?? "").padEnd(9, "0")) };
}

/** RFC 3339 text in UTC of a Timestamp: fraction digits in groups of three, as many as it needs
 * (`...:00Z`, `...:00.123Z`, `...:00.123456Z`, `...:00.123456789Z`), the way the services write it. */
export function timestampToIso(timestamp: Timestamp): string {
  const whole = new Date(timestamp.seconds * 1000).toISOString().slice(0, 19);
  let fraction = String(timestamp.nanos).padStart(9, "0");
  while (fraction.endsWith("000")) {
    fraction = fraction.slice(0, -3);
  }
  return `${whole}${fraction ? "." + fraction : ""}Z`;
}
