// FNV-1a 64 over a key's bytes: a sequence key's section is
// fnv1a64(key) mod sections (GeneratorInfo.sections).

const offset = 14695981039346656037n;
const prime = 1099511628211n;
const mask = (1n << 64n) - 1n;

/** FNV-1a 64 of bytes, as an unsigned 64-bit bigint. */
export function fnv1a64(bytes: Uint8Array): bigint {
  let h = offset;
  for (const b of bytes) {
    h ^= BigInt(b);
    h = (h * prime) & mask;
  }
  return h;
}

/** The section of key among sections (sections > 0). */
export function sectionOf(key: Uint8Array, sections: number): number {
  return Number(fnv1a64(key) % BigInt(sections));
}
