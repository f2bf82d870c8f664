package io.netty.handler.ssl;

import javax.net.ssl.SSLContext;

/**
 * ALPN over the JDK's own TLS (Java 9+) for Debian's netty 4.1.48, whose
 * netty-handler jar lacks JdkAlpnApplicationProtocolNegotiator (Debian
 * packages it without the Jetty-ALPN and BouncyCastle code it refers to), so
 * that gRPC's usual TLS set-up fails with "JDK provider does not support
 * ALPN protocol". The Java9SslEngine that negotiator would use is in the
 * jar: this wires it up. It lives in netty's package because the pieces
 * are package-private.
 *
 * <p>Only build.sh (the offline build on Debian's jars) compiles it; a
 * Maven build of the client uses the ordinary netty, where
 * GrpcSslContexts works and this class is absent. The client loads it by
 * name only after GrpcSslContexts failed.
 */
public final class FirnDebianAlpn {
  private FirnDebianAlpn() {}

  /** A client context speaking h2 over ALPN, on an initialised SSLContext. */
  public static SslContext clientContext(SSLContext ctx) {
    JdkApplicationProtocolNegotiator apn = new JdkBaseApplicationProtocolNegotiator(
        (engine, negotiator, isServer) -> new Java9SslEngine(engine, negotiator, isServer),
        JdkBaseApplicationProtocolNegotiator.FAIL_SELECTOR_FACTORY,
        JdkBaseApplicationProtocolNegotiator.FAIL_SELECTION_LISTENER_FACTORY,
        "h2");
    return new JdkSslContext(ctx, true, null, IdentityCipherSuiteFilter.INSTANCE, apn, ClientAuth.NONE, null, false);
  }
}
