package io.github.firnid.firn.client;

/**
 * A run of {@code count} consecutive IDs: {@code first}, {@code first+1},
 * …, {@code first+count-1}.
 */
public record Run(long first, long count) {
  @Override
  public String toString() {
    return "Run[" + Long.toUnsignedString(first) + "+" + count + "]";
  }
}
