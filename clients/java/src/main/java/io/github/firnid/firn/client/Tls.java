package io.github.firnid.firn.client;

import io.grpc.netty.GrpcSslContexts;
import io.netty.handler.ssl.SslContext;
import io.netty.handler.ssl.SslContextBuilder;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.PrivateKey;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** TLS contexts from PEM files, including the SEC1 ("EC PRIVATE KEY") keys Go tools write. */
final class Tls {
  private Tls() {}

  static SslContext context(String caFile, String certFile, String keyFile) {
    try {
      return grpcContext(caFile, certFile, keyFile);
    } catch (IllegalArgumentException | UnsupportedOperationException e) {
      if (String.valueOf(e.getMessage()).contains("ALPN")) {
        return jdkAlpnContext(caFile, certFile, keyFile, e);
      }
      throw e;
    }
  }

  /**
   * Where the netty on the class path cannot do ALPN over the JDK's TLS
   * (Debian's build): an SSLContext of the JDK with the CA and key, handed
   * to the helper that build.sh compiles for that netty.
   */
  private static SslContext jdkAlpnContext(String caFile, String certFile, String keyFile, RuntimeException first) {
    try {
      javax.net.ssl.TrustManager[] tms = null;
      if (caFile != null && !caFile.isEmpty()) {
        java.security.KeyStore ts = java.security.KeyStore.getInstance(java.security.KeyStore.getDefaultType());
        ts.load(null, null);
        int i = 0;
        for (X509Certificate c : certs(caFile)) {
          ts.setCertificateEntry("ca" + i++, c);
        }
        javax.net.ssl.TrustManagerFactory tmf =
            javax.net.ssl.TrustManagerFactory.getInstance(javax.net.ssl.TrustManagerFactory.getDefaultAlgorithm());
        tmf.init(ts);
        tms = tmf.getTrustManagers();
      }
      javax.net.ssl.KeyManager[] kms = null;
      if (certFile != null) {
        java.security.KeyStore ks = java.security.KeyStore.getInstance(java.security.KeyStore.getDefaultType());
        ks.load(null, null);
        char[] pw = new char[0];
        ks.setKeyEntry("client", key(keyFile), pw, certs(certFile).toArray(new X509Certificate[0]));
        javax.net.ssl.KeyManagerFactory kmf =
            javax.net.ssl.KeyManagerFactory.getInstance(javax.net.ssl.KeyManagerFactory.getDefaultAlgorithm());
        kmf.init(ks, pw);
        kms = kmf.getKeyManagers();
      }
      javax.net.ssl.SSLContext ctx = javax.net.ssl.SSLContext.getInstance("TLS");
      ctx.init(kms, tms, null);
      Class<?> helper = Class.forName("io.netty.handler.ssl.FirnDebianAlpn");
      return (SslContext) helper.getMethod("clientContext", javax.net.ssl.SSLContext.class).invoke(null, ctx);
    } catch (ClassNotFoundException e) {
      throw first;
    } catch (IOException | GeneralSecurityException | ReflectiveOperationException e) {
      throw new IllegalArgumentException("TLS: " + e.getMessage(), e);
    }
  }

  private static SslContext grpcContext(String caFile, String certFile, String keyFile) {
    try {
      SslContextBuilder b = GrpcSslContexts.forClient();
      if (caFile != null && !caFile.isEmpty()) {
        b.trustManager(new File(caFile));
      }
      if (certFile != null) {
        List<X509Certificate> chain = certs(certFile);
        PrivateKey key = key(keyFile);
        b.keyManager(key, chain.toArray(new X509Certificate[0]));
      }
      return b.build();
    } catch (IOException | GeneralSecurityException | RuntimeException e) {
      throw new IllegalArgumentException("TLS: " + e.getMessage(), e);
    }
  }

  private static final Pattern PEM = Pattern.compile(
      "-----BEGIN ([A-Z0-9 ]+)-----\\s*([A-Za-z0-9+/=\\s]+?)\\s*-----END \\1-----");

  record Block(String type, byte[] der) {}

  static List<Block> blocks(String path) throws IOException {
    String text = Files.readString(Path.of(path), StandardCharsets.US_ASCII);
    List<Block> out = new ArrayList<>();
    Matcher m = PEM.matcher(text);
    while (m.find()) {
      out.add(new Block(m.group(1), Base64.getMimeDecoder().decode(m.group(2))));
    }
    if (out.isEmpty()) {
      throw new IOException(path + " holds no PEM block");
    }
    return out;
  }

  static List<X509Certificate> certs(String path) throws IOException, GeneralSecurityException {
    CertificateFactory cf = CertificateFactory.getInstance("X.509");
    List<X509Certificate> out = new ArrayList<>();
    for (Block b : blocks(path)) {
      if (b.type.equals("CERTIFICATE")) {
        out.add((X509Certificate) cf.generateCertificate(new ByteArrayInputStream(b.der)));
      }
    }
    if (out.isEmpty()) {
      throw new IOException(path + " holds no certificate");
    }
    return out;
  }

  static PrivateKey key(String path) throws IOException, GeneralSecurityException {
    for (Block b : blocks(path)) {
      switch (b.type) {
        case "PRIVATE KEY" -> {
          byte[] der = b.der;
          try {
            return KeyFactory.getInstance("EC").generatePrivate(new PKCS8EncodedKeySpec(der));
          } catch (GeneralSecurityException e) {
            return KeyFactory.getInstance("RSA").generatePrivate(new PKCS8EncodedKeySpec(der));
          }
        }
        case "EC PRIVATE KEY" -> {
          return KeyFactory.getInstance("EC").generatePrivate(new PKCS8EncodedKeySpec(ecToPkcs8(b.der)));
        }
        case "RSA PRIVATE KEY" -> {
          byte[] alg = seq(concat(oid(new byte[] {0x2a, (byte) 0x86, 0x48, (byte) 0x86, (byte) 0xf7, 0x0d, 1, 1, 1}),
              new byte[] {0x05, 0x00}));
          return KeyFactory.getInstance("RSA").generatePrivate(new PKCS8EncodedKeySpec(pkcs8(alg, b.der)));
        }
        default -> {
        }
      }
    }
    throw new IOException(path + " holds no private key");
  }

  /**
   * Wraps a SEC1 ECPrivateKey (SEQUENCE {version, privateKey, [0] curve OID,
   * [1] public key}) in a PKCS#8 PrivateKeyInfo naming id-ecPublicKey and
   * that curve.
   */
  static byte[] ecToPkcs8(byte[] sec1) throws IOException {
    // Walk the SEQUENCE's elements to find [0] (tag 0xa0).
    int[] hdr = header(sec1, 0);
    int pos = hdr[0];
    int end = hdr[0] + hdr[1];
    byte[] curve = null;
    while (pos < end) {
      int tag = sec1[pos] & 0xff;
      int[] h = header(sec1, pos);
      if (tag == 0xa0) {
        curve = java.util.Arrays.copyOfRange(sec1, h[0], h[0] + h[1]);
      }
      pos = h[0] + h[1];
    }
    if (curve == null) {
      throw new IOException("EC key without its curve");
    }
    byte[] ecPublicKey = oid(new byte[] {0x2a, (byte) 0x86, 0x48, (byte) 0xce, 0x3d, 0x02, 0x01});
    return pkcs8(seq(concat(ecPublicKey, curve)), sec1);
  }

  private static byte[] pkcs8(byte[] algorithm, byte[] key) {
    return seq(concat(new byte[] {0x02, 0x01, 0x00}, algorithm, tlv(0x04, key)));
  }

  /** The content's offset and length of the DER element at pos. */
  private static int[] header(byte[] der, int pos) throws IOException {
    if (pos + 2 > der.length) {
      throw new IOException("truncated DER");
    }
    int len = der[pos + 1] & 0xff;
    int off = pos + 2;
    if (len >= 0x80) {
      int n = len & 0x7f;
      if (n == 0 || n > 3) {
        throw new IOException("bad DER length");
      }
      len = 0;
      for (int i = 0; i < n; i++) {
        len = (len << 8) | (der[off + i] & 0xff);
      }
      off += n;
    }
    if (off + len > der.length) {
      throw new IOException("truncated DER");
    }
    return new int[] {off, len};
  }

  private static byte[] oid(byte[] body) {
    return tlv(0x06, body);
  }

  private static byte[] seq(byte[] body) {
    return tlv(0x30, body);
  }

  private static byte[] tlv(int tag, byte[] body) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    out.write(tag);
    int n = body.length;
    if (n < 0x80) {
      out.write(n);
    } else if (n < 0x100) {
      out.write(0x81);
      out.write(n);
    } else if (n < 0x10000) {
      out.write(0x82);
      out.write(n >> 8);
      out.write(n);
    } else {
      out.write(0x83);
      out.write(n >> 16);
      out.write(n >> 8);
      out.write(n);
    }
    out.writeBytes(body);
    return out.toByteArray();
  }

  private static byte[] concat(byte[]... parts) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    for (byte[] p : parts) {
      out.writeBytes(p);
    }
    return out.toByteArray();
  }
}
