package io.github.firnid.firn.client;

/**
 * Values of one key's sequence handed out by one call: {@code first} …
 * {@code first+count-1}.
 */
public record SeqRange(long first, int count) {
  /** The last value of the range. */
  public long last() {
    return first + count - 1;
  }
}
