package io.github.firnid.firn.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * IDService issues and decodes IDs. An empty generator name means the
 * node's default generator; an unknown one is NOT_FOUND. A generator that
 * is not serving answers UNAVAILABLE at once, never after a wait: the
 * message says why for people, and the status details carry
 * google.rpc.ErrorInfo (domain "firn.v1.IDService", reason one of
 * ErrorReason's names; metadata values are bare numbers or names, units
 * in the keys: limit_ms, measured_ms, limit_ids, …), when the node knows
 * when it will serve again google.rpc.RetryInfo, and for an invalid
 * argument google.rpc.BadRequest naming the field.
 * </pre>
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: firn/v1/firn.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class IDServiceGrpc {

  private IDServiceGrpc() {}

  public static final String SERVICE_NAME = "firn.v1.IDService";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<io.github.firnid.firn.v1.NextIDRequest,
      io.github.firnid.firn.v1.NextIDResponse> getNextIDMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "NextID",
      requestType = io.github.firnid.firn.v1.NextIDRequest.class,
      responseType = io.github.firnid.firn.v1.NextIDResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.firnid.firn.v1.NextIDRequest,
      io.github.firnid.firn.v1.NextIDResponse> getNextIDMethod() {
    io.grpc.MethodDescriptor<io.github.firnid.firn.v1.NextIDRequest, io.github.firnid.firn.v1.NextIDResponse> getNextIDMethod;
    if ((getNextIDMethod = IDServiceGrpc.getNextIDMethod) == null) {
      synchronized (IDServiceGrpc.class) {
        if ((getNextIDMethod = IDServiceGrpc.getNextIDMethod) == null) {
          IDServiceGrpc.getNextIDMethod = getNextIDMethod =
              io.grpc.MethodDescriptor.<io.github.firnid.firn.v1.NextIDRequest, io.github.firnid.firn.v1.NextIDResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "NextID"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.firnid.firn.v1.NextIDRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.firnid.firn.v1.NextIDResponse.getDefaultInstance()))
              .setSchemaDescriptor(new IDServiceMethodDescriptorSupplier("NextID"))
              .build();
        }
      }
    }
    return getNextIDMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.firnid.firn.v1.NextIDsRequest,
      io.github.firnid.firn.v1.NextIDsResponse> getNextIDsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "NextIDs",
      requestType = io.github.firnid.firn.v1.NextIDsRequest.class,
      responseType = io.github.firnid.firn.v1.NextIDsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.firnid.firn.v1.NextIDsRequest,
      io.github.firnid.firn.v1.NextIDsResponse> getNextIDsMethod() {
    io.grpc.MethodDescriptor<io.github.firnid.firn.v1.NextIDsRequest, io.github.firnid.firn.v1.NextIDsResponse> getNextIDsMethod;
    if ((getNextIDsMethod = IDServiceGrpc.getNextIDsMethod) == null) {
      synchronized (IDServiceGrpc.class) {
        if ((getNextIDsMethod = IDServiceGrpc.getNextIDsMethod) == null) {
          IDServiceGrpc.getNextIDsMethod = getNextIDsMethod =
              io.grpc.MethodDescriptor.<io.github.firnid.firn.v1.NextIDsRequest, io.github.firnid.firn.v1.NextIDsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "NextIDs"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.firnid.firn.v1.NextIDsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.firnid.firn.v1.NextIDsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new IDServiceMethodDescriptorSupplier("NextIDs"))
              .build();
        }
      }
    }
    return getNextIDsMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.firnid.firn.v1.NextRangeRequest,
      io.github.firnid.firn.v1.NextRangeResponse> getNextRangeMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "NextRange",
      requestType = io.github.firnid.firn.v1.NextRangeRequest.class,
      responseType = io.github.firnid.firn.v1.NextRangeResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.firnid.firn.v1.NextRangeRequest,
      io.github.firnid.firn.v1.NextRangeResponse> getNextRangeMethod() {
    io.grpc.MethodDescriptor<io.github.firnid.firn.v1.NextRangeRequest, io.github.firnid.firn.v1.NextRangeResponse> getNextRangeMethod;
    if ((getNextRangeMethod = IDServiceGrpc.getNextRangeMethod) == null) {
      synchronized (IDServiceGrpc.class) {
        if ((getNextRangeMethod = IDServiceGrpc.getNextRangeMethod) == null) {
          IDServiceGrpc.getNextRangeMethod = getNextRangeMethod =
              io.grpc.MethodDescriptor.<io.github.firnid.firn.v1.NextRangeRequest, io.github.firnid.firn.v1.NextRangeResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "NextRange"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.firnid.firn.v1.NextRangeRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.firnid.firn.v1.NextRangeResponse.getDefaultInstance()))
              .setSchemaDescriptor(new IDServiceMethodDescriptorSupplier("NextRange"))
              .build();
        }
      }
    }
    return getNextRangeMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.firnid.firn.v1.DecodeRequest,
      io.github.firnid.firn.v1.DecodeResponse> getDecodeMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Decode",
      requestType = io.github.firnid.firn.v1.DecodeRequest.class,
      responseType = io.github.firnid.firn.v1.DecodeResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.firnid.firn.v1.DecodeRequest,
      io.github.firnid.firn.v1.DecodeResponse> getDecodeMethod() {
    io.grpc.MethodDescriptor<io.github.firnid.firn.v1.DecodeRequest, io.github.firnid.firn.v1.DecodeResponse> getDecodeMethod;
    if ((getDecodeMethod = IDServiceGrpc.getDecodeMethod) == null) {
      synchronized (IDServiceGrpc.class) {
        if ((getDecodeMethod = IDServiceGrpc.getDecodeMethod) == null) {
          IDServiceGrpc.getDecodeMethod = getDecodeMethod =
              io.grpc.MethodDescriptor.<io.github.firnid.firn.v1.DecodeRequest, io.github.firnid.firn.v1.DecodeResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Decode"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.firnid.firn.v1.DecodeRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.firnid.firn.v1.DecodeResponse.getDefaultInstance()))
              .setSchemaDescriptor(new IDServiceMethodDescriptorSupplier("Decode"))
              .build();
        }
      }
    }
    return getDecodeMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.firnid.firn.v1.InfoRequest,
      io.github.firnid.firn.v1.InfoResponse> getInfoMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Info",
      requestType = io.github.firnid.firn.v1.InfoRequest.class,
      responseType = io.github.firnid.firn.v1.InfoResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.firnid.firn.v1.InfoRequest,
      io.github.firnid.firn.v1.InfoResponse> getInfoMethod() {
    io.grpc.MethodDescriptor<io.github.firnid.firn.v1.InfoRequest, io.github.firnid.firn.v1.InfoResponse> getInfoMethod;
    if ((getInfoMethod = IDServiceGrpc.getInfoMethod) == null) {
      synchronized (IDServiceGrpc.class) {
        if ((getInfoMethod = IDServiceGrpc.getInfoMethod) == null) {
          IDServiceGrpc.getInfoMethod = getInfoMethod =
              io.grpc.MethodDescriptor.<io.github.firnid.firn.v1.InfoRequest, io.github.firnid.firn.v1.InfoResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Info"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.firnid.firn.v1.InfoRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.firnid.firn.v1.InfoResponse.getDefaultInstance()))
              .setSchemaDescriptor(new IDServiceMethodDescriptorSupplier("Info"))
              .build();
        }
      }
    }
    return getInfoMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.firnid.firn.v1.NextSeqRequest,
      io.github.firnid.firn.v1.NextSeqResponse> getNextSeqMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "NextSeq",
      requestType = io.github.firnid.firn.v1.NextSeqRequest.class,
      responseType = io.github.firnid.firn.v1.NextSeqResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.firnid.firn.v1.NextSeqRequest,
      io.github.firnid.firn.v1.NextSeqResponse> getNextSeqMethod() {
    io.grpc.MethodDescriptor<io.github.firnid.firn.v1.NextSeqRequest, io.github.firnid.firn.v1.NextSeqResponse> getNextSeqMethod;
    if ((getNextSeqMethod = IDServiceGrpc.getNextSeqMethod) == null) {
      synchronized (IDServiceGrpc.class) {
        if ((getNextSeqMethod = IDServiceGrpc.getNextSeqMethod) == null) {
          IDServiceGrpc.getNextSeqMethod = getNextSeqMethod =
              io.grpc.MethodDescriptor.<io.github.firnid.firn.v1.NextSeqRequest, io.github.firnid.firn.v1.NextSeqResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "NextSeq"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.firnid.firn.v1.NextSeqRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.firnid.firn.v1.NextSeqResponse.getDefaultInstance()))
              .setSchemaDescriptor(new IDServiceMethodDescriptorSupplier("NextSeq"))
              .build();
        }
      }
    }
    return getNextSeqMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.firnid.firn.v1.NextSeqsRequest,
      io.github.firnid.firn.v1.NextSeqsResponse> getNextSeqsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "NextSeqs",
      requestType = io.github.firnid.firn.v1.NextSeqsRequest.class,
      responseType = io.github.firnid.firn.v1.NextSeqsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.firnid.firn.v1.NextSeqsRequest,
      io.github.firnid.firn.v1.NextSeqsResponse> getNextSeqsMethod() {
    io.grpc.MethodDescriptor<io.github.firnid.firn.v1.NextSeqsRequest, io.github.firnid.firn.v1.NextSeqsResponse> getNextSeqsMethod;
    if ((getNextSeqsMethod = IDServiceGrpc.getNextSeqsMethod) == null) {
      synchronized (IDServiceGrpc.class) {
        if ((getNextSeqsMethod = IDServiceGrpc.getNextSeqsMethod) == null) {
          IDServiceGrpc.getNextSeqsMethod = getNextSeqsMethod =
              io.grpc.MethodDescriptor.<io.github.firnid.firn.v1.NextSeqsRequest, io.github.firnid.firn.v1.NextSeqsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "NextSeqs"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.firnid.firn.v1.NextSeqsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.firnid.firn.v1.NextSeqsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new IDServiceMethodDescriptorSupplier("NextSeqs"))
              .build();
        }
      }
    }
    return getNextSeqsMethod;
  }

  private static volatile io.grpc.MethodDescriptor<io.github.firnid.firn.v1.CurrentSeqRequest,
      io.github.firnid.firn.v1.CurrentSeqResponse> getCurrentSeqMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "CurrentSeq",
      requestType = io.github.firnid.firn.v1.CurrentSeqRequest.class,
      responseType = io.github.firnid.firn.v1.CurrentSeqResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<io.github.firnid.firn.v1.CurrentSeqRequest,
      io.github.firnid.firn.v1.CurrentSeqResponse> getCurrentSeqMethod() {
    io.grpc.MethodDescriptor<io.github.firnid.firn.v1.CurrentSeqRequest, io.github.firnid.firn.v1.CurrentSeqResponse> getCurrentSeqMethod;
    if ((getCurrentSeqMethod = IDServiceGrpc.getCurrentSeqMethod) == null) {
      synchronized (IDServiceGrpc.class) {
        if ((getCurrentSeqMethod = IDServiceGrpc.getCurrentSeqMethod) == null) {
          IDServiceGrpc.getCurrentSeqMethod = getCurrentSeqMethod =
              io.grpc.MethodDescriptor.<io.github.firnid.firn.v1.CurrentSeqRequest, io.github.firnid.firn.v1.CurrentSeqResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "CurrentSeq"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.firnid.firn.v1.CurrentSeqRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  io.github.firnid.firn.v1.CurrentSeqResponse.getDefaultInstance()))
              .setSchemaDescriptor(new IDServiceMethodDescriptorSupplier("CurrentSeq"))
              .build();
        }
      }
    }
    return getCurrentSeqMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static IDServiceStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<IDServiceStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<IDServiceStub>() {
        @java.lang.Override
        public IDServiceStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new IDServiceStub(channel, callOptions);
        }
      };
    return IDServiceStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static IDServiceBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<IDServiceBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<IDServiceBlockingStub>() {
        @java.lang.Override
        public IDServiceBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new IDServiceBlockingStub(channel, callOptions);
        }
      };
    return IDServiceBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static IDServiceFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<IDServiceFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<IDServiceFutureStub>() {
        @java.lang.Override
        public IDServiceFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new IDServiceFutureStub(channel, callOptions);
        }
      };
    return IDServiceFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * IDService issues and decodes IDs. An empty generator name means the
   * node's default generator; an unknown one is NOT_FOUND. A generator that
   * is not serving answers UNAVAILABLE at once, never after a wait: the
   * message says why for people, and the status details carry
   * google.rpc.ErrorInfo (domain "firn.v1.IDService", reason one of
   * ErrorReason's names; metadata values are bare numbers or names, units
   * in the keys: limit_ms, measured_ms, limit_ids, …), when the node knows
   * when it will serve again google.rpc.RetryInfo, and for an invalid
   * argument google.rpc.BadRequest naming the field.
   * </pre>
   */
  public static abstract class IDServiceImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * NextID returns one ID.
     * </pre>
     */
    public void nextID(io.github.firnid.firn.v1.NextIDRequest request,
        io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.NextIDResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getNextIDMethod(), responseObserver);
    }

    /**
     * <pre>
     * NextIDs returns exactly count distinct IDs, increasing. count runs from
     * 1 to the generator's max_batch (see Info); anything else is
     * INVALID_ARGUMENT naming the bound.
     * </pre>
     */
    public void nextIDs(io.github.firnid.firn.v1.NextIDsRequest request,
        io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.NextIDsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getNextIDsMethod(), responseObserver);
    }

    /**
     * <pre>
     * NextRange returns exactly count distinct IDs as runs of consecutive
     * IDs: the same IDs NextIDs would return, in the same increasing order,
     * without 8 bytes per ID on the wire. count runs from 1 to the
     * generator's max_range (see Info); anything else is INVALID_ARGUMENT
     * naming the bound.
     * </pre>
     */
    public void nextRange(io.github.firnid.firn.v1.NextRangeRequest request,
        io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.NextRangeResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getNextRangeMethod(), responseObserver);
    }

    /**
     * <pre>
     * Decode splits an ID into its fields under a generator's layout.
     * </pre>
     */
    public void decode(io.github.firnid.firn.v1.DecodeRequest request,
        io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.DecodeResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getDecodeMethod(), responseObserver);
    }

    /**
     * <pre>
     * Info describes the node and each of its generators.
     * </pre>
     */
    public void info(io.github.firnid.firn.v1.InfoRequest request,
        io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.InfoResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getInfoMethod(), responseObserver);
    }

    /**
     * <pre>
     * NextSeq hands out count values of a key's sequence in a sequence
     * generator (--generator NAME=seq): first … first+count-1. For one key,
     * values strictly increase in real time: a call that returned before
     * another began got smaller values, whichever nodes answered. Only the
     * node owning the key's section answers (the section is
     * fnv1a64(key) mod sections, GeneratorInfo.sections; the owners are
     * GeneratorInfo.section_owners); any other node refuses
     * FAILED_PRECONDITION with reason WRONG_NODE and metadata owner (the
     * owner's gRPC address) and owner_name, and a section between owners is
     * UNAVAILABLE with reason SECTION_MOVING and RetryInfo. A key is 1 to
     * 256 bytes; count 0 means 1, at most 10000.
     * </pre>
     */
    public void nextSeq(io.github.firnid.firn.v1.NextSeqRequest request,
        io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.NextSeqResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getNextSeqMethod(), responseObserver);
    }

    /**
     * <pre>
     * NextSeqs serves many keys in one call: one result per item, in order,
     * each refused alone with its reason (a key owned by another node
     * included: the client sends each node its own keys). At most 1000
     * items.
     * </pre>
     */
    public void nextSeqs(io.github.firnid.firn.v1.NextSeqsRequest request,
        io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.NextSeqsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getNextSeqsMethod(), responseObserver);
    }

    /**
     * <pre>
     * CurrentSeq returns a value at or above every value handed out for the
     * key, without handing one out: 0 for a key never used in a section
     * that never moved. Routed as NextSeq.
     * </pre>
     */
    public void currentSeq(io.github.firnid.firn.v1.CurrentSeqRequest request,
        io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.CurrentSeqResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getCurrentSeqMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getNextIDMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.firnid.firn.v1.NextIDRequest,
                io.github.firnid.firn.v1.NextIDResponse>(
                  this, METHODID_NEXT_ID)))
          .addMethod(
            getNextIDsMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.firnid.firn.v1.NextIDsRequest,
                io.github.firnid.firn.v1.NextIDsResponse>(
                  this, METHODID_NEXT_IDS)))
          .addMethod(
            getNextRangeMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.firnid.firn.v1.NextRangeRequest,
                io.github.firnid.firn.v1.NextRangeResponse>(
                  this, METHODID_NEXT_RANGE)))
          .addMethod(
            getDecodeMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.firnid.firn.v1.DecodeRequest,
                io.github.firnid.firn.v1.DecodeResponse>(
                  this, METHODID_DECODE)))
          .addMethod(
            getInfoMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.firnid.firn.v1.InfoRequest,
                io.github.firnid.firn.v1.InfoResponse>(
                  this, METHODID_INFO)))
          .addMethod(
            getNextSeqMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.firnid.firn.v1.NextSeqRequest,
                io.github.firnid.firn.v1.NextSeqResponse>(
                  this, METHODID_NEXT_SEQ)))
          .addMethod(
            getNextSeqsMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.firnid.firn.v1.NextSeqsRequest,
                io.github.firnid.firn.v1.NextSeqsResponse>(
                  this, METHODID_NEXT_SEQS)))
          .addMethod(
            getCurrentSeqMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                io.github.firnid.firn.v1.CurrentSeqRequest,
                io.github.firnid.firn.v1.CurrentSeqResponse>(
                  this, METHODID_CURRENT_SEQ)))
          .build();
    }
  }

  /**
   * <pre>
   * IDService issues and decodes IDs. An empty generator name means the
   * node's default generator; an unknown one is NOT_FOUND. A generator that
   * is not serving answers UNAVAILABLE at once, never after a wait: the
   * message says why for people, and the status details carry
   * google.rpc.ErrorInfo (domain "firn.v1.IDService", reason one of
   * ErrorReason's names; metadata values are bare numbers or names, units
   * in the keys: limit_ms, measured_ms, limit_ids, …), when the node knows
   * when it will serve again google.rpc.RetryInfo, and for an invalid
   * argument google.rpc.BadRequest naming the field.
   * </pre>
   */
  public static final class IDServiceStub extends io.grpc.stub.AbstractAsyncStub<IDServiceStub> {
    private IDServiceStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected IDServiceStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new IDServiceStub(channel, callOptions);
    }

    /**
     * <pre>
     * NextID returns one ID.
     * </pre>
     */
    public void nextID(io.github.firnid.firn.v1.NextIDRequest request,
        io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.NextIDResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getNextIDMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * NextIDs returns exactly count distinct IDs, increasing. count runs from
     * 1 to the generator's max_batch (see Info); anything else is
     * INVALID_ARGUMENT naming the bound.
     * </pre>
     */
    public void nextIDs(io.github.firnid.firn.v1.NextIDsRequest request,
        io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.NextIDsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getNextIDsMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * NextRange returns exactly count distinct IDs as runs of consecutive
     * IDs: the same IDs NextIDs would return, in the same increasing order,
     * without 8 bytes per ID on the wire. count runs from 1 to the
     * generator's max_range (see Info); anything else is INVALID_ARGUMENT
     * naming the bound.
     * </pre>
     */
    public void nextRange(io.github.firnid.firn.v1.NextRangeRequest request,
        io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.NextRangeResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getNextRangeMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Decode splits an ID into its fields under a generator's layout.
     * </pre>
     */
    public void decode(io.github.firnid.firn.v1.DecodeRequest request,
        io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.DecodeResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getDecodeMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Info describes the node and each of its generators.
     * </pre>
     */
    public void info(io.github.firnid.firn.v1.InfoRequest request,
        io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.InfoResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getInfoMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * NextSeq hands out count values of a key's sequence in a sequence
     * generator (--generator NAME=seq): first … first+count-1. For one key,
     * values strictly increase in real time: a call that returned before
     * another began got smaller values, whichever nodes answered. Only the
     * node owning the key's section answers (the section is
     * fnv1a64(key) mod sections, GeneratorInfo.sections; the owners are
     * GeneratorInfo.section_owners); any other node refuses
     * FAILED_PRECONDITION with reason WRONG_NODE and metadata owner (the
     * owner's gRPC address) and owner_name, and a section between owners is
     * UNAVAILABLE with reason SECTION_MOVING and RetryInfo. A key is 1 to
     * 256 bytes; count 0 means 1, at most 10000.
     * </pre>
     */
    public void nextSeq(io.github.firnid.firn.v1.NextSeqRequest request,
        io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.NextSeqResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getNextSeqMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * NextSeqs serves many keys in one call: one result per item, in order,
     * each refused alone with its reason (a key owned by another node
     * included: the client sends each node its own keys). At most 1000
     * items.
     * </pre>
     */
    public void nextSeqs(io.github.firnid.firn.v1.NextSeqsRequest request,
        io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.NextSeqsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getNextSeqsMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * CurrentSeq returns a value at or above every value handed out for the
     * key, without handing one out: 0 for a key never used in a section
     * that never moved. Routed as NextSeq.
     * </pre>
     */
    public void currentSeq(io.github.firnid.firn.v1.CurrentSeqRequest request,
        io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.CurrentSeqResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getCurrentSeqMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * <pre>
   * IDService issues and decodes IDs. An empty generator name means the
   * node's default generator; an unknown one is NOT_FOUND. A generator that
   * is not serving answers UNAVAILABLE at once, never after a wait: the
   * message says why for people, and the status details carry
   * google.rpc.ErrorInfo (domain "firn.v1.IDService", reason one of
   * ErrorReason's names; metadata values are bare numbers or names, units
   * in the keys: limit_ms, measured_ms, limit_ids, …), when the node knows
   * when it will serve again google.rpc.RetryInfo, and for an invalid
   * argument google.rpc.BadRequest naming the field.
   * </pre>
   */
  public static final class IDServiceBlockingStub extends io.grpc.stub.AbstractBlockingStub<IDServiceBlockingStub> {
    private IDServiceBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected IDServiceBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new IDServiceBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * NextID returns one ID.
     * </pre>
     */
    public io.github.firnid.firn.v1.NextIDResponse nextID(io.github.firnid.firn.v1.NextIDRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getNextIDMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * NextIDs returns exactly count distinct IDs, increasing. count runs from
     * 1 to the generator's max_batch (see Info); anything else is
     * INVALID_ARGUMENT naming the bound.
     * </pre>
     */
    public io.github.firnid.firn.v1.NextIDsResponse nextIDs(io.github.firnid.firn.v1.NextIDsRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getNextIDsMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * NextRange returns exactly count distinct IDs as runs of consecutive
     * IDs: the same IDs NextIDs would return, in the same increasing order,
     * without 8 bytes per ID on the wire. count runs from 1 to the
     * generator's max_range (see Info); anything else is INVALID_ARGUMENT
     * naming the bound.
     * </pre>
     */
    public io.github.firnid.firn.v1.NextRangeResponse nextRange(io.github.firnid.firn.v1.NextRangeRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getNextRangeMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Decode splits an ID into its fields under a generator's layout.
     * </pre>
     */
    public io.github.firnid.firn.v1.DecodeResponse decode(io.github.firnid.firn.v1.DecodeRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getDecodeMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Info describes the node and each of its generators.
     * </pre>
     */
    public io.github.firnid.firn.v1.InfoResponse info(io.github.firnid.firn.v1.InfoRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getInfoMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * NextSeq hands out count values of a key's sequence in a sequence
     * generator (--generator NAME=seq): first … first+count-1. For one key,
     * values strictly increase in real time: a call that returned before
     * another began got smaller values, whichever nodes answered. Only the
     * node owning the key's section answers (the section is
     * fnv1a64(key) mod sections, GeneratorInfo.sections; the owners are
     * GeneratorInfo.section_owners); any other node refuses
     * FAILED_PRECONDITION with reason WRONG_NODE and metadata owner (the
     * owner's gRPC address) and owner_name, and a section between owners is
     * UNAVAILABLE with reason SECTION_MOVING and RetryInfo. A key is 1 to
     * 256 bytes; count 0 means 1, at most 10000.
     * </pre>
     */
    public io.github.firnid.firn.v1.NextSeqResponse nextSeq(io.github.firnid.firn.v1.NextSeqRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getNextSeqMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * NextSeqs serves many keys in one call: one result per item, in order,
     * each refused alone with its reason (a key owned by another node
     * included: the client sends each node its own keys). At most 1000
     * items.
     * </pre>
     */
    public io.github.firnid.firn.v1.NextSeqsResponse nextSeqs(io.github.firnid.firn.v1.NextSeqsRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getNextSeqsMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * CurrentSeq returns a value at or above every value handed out for the
     * key, without handing one out: 0 for a key never used in a section
     * that never moved. Routed as NextSeq.
     * </pre>
     */
    public io.github.firnid.firn.v1.CurrentSeqResponse currentSeq(io.github.firnid.firn.v1.CurrentSeqRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getCurrentSeqMethod(), getCallOptions(), request);
    }
  }

  /**
   * <pre>
   * IDService issues and decodes IDs. An empty generator name means the
   * node's default generator; an unknown one is NOT_FOUND. A generator that
   * is not serving answers UNAVAILABLE at once, never after a wait: the
   * message says why for people, and the status details carry
   * google.rpc.ErrorInfo (domain "firn.v1.IDService", reason one of
   * ErrorReason's names; metadata values are bare numbers or names, units
   * in the keys: limit_ms, measured_ms, limit_ids, …), when the node knows
   * when it will serve again google.rpc.RetryInfo, and for an invalid
   * argument google.rpc.BadRequest naming the field.
   * </pre>
   */
  public static final class IDServiceFutureStub extends io.grpc.stub.AbstractFutureStub<IDServiceFutureStub> {
    private IDServiceFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected IDServiceFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new IDServiceFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * NextID returns one ID.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.firnid.firn.v1.NextIDResponse> nextID(
        io.github.firnid.firn.v1.NextIDRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getNextIDMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * NextIDs returns exactly count distinct IDs, increasing. count runs from
     * 1 to the generator's max_batch (see Info); anything else is
     * INVALID_ARGUMENT naming the bound.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.firnid.firn.v1.NextIDsResponse> nextIDs(
        io.github.firnid.firn.v1.NextIDsRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getNextIDsMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * NextRange returns exactly count distinct IDs as runs of consecutive
     * IDs: the same IDs NextIDs would return, in the same increasing order,
     * without 8 bytes per ID on the wire. count runs from 1 to the
     * generator's max_range (see Info); anything else is INVALID_ARGUMENT
     * naming the bound.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.firnid.firn.v1.NextRangeResponse> nextRange(
        io.github.firnid.firn.v1.NextRangeRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getNextRangeMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Decode splits an ID into its fields under a generator's layout.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.firnid.firn.v1.DecodeResponse> decode(
        io.github.firnid.firn.v1.DecodeRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getDecodeMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Info describes the node and each of its generators.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.firnid.firn.v1.InfoResponse> info(
        io.github.firnid.firn.v1.InfoRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getInfoMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * NextSeq hands out count values of a key's sequence in a sequence
     * generator (--generator NAME=seq): first … first+count-1. For one key,
     * values strictly increase in real time: a call that returned before
     * another began got smaller values, whichever nodes answered. Only the
     * node owning the key's section answers (the section is
     * fnv1a64(key) mod sections, GeneratorInfo.sections; the owners are
     * GeneratorInfo.section_owners); any other node refuses
     * FAILED_PRECONDITION with reason WRONG_NODE and metadata owner (the
     * owner's gRPC address) and owner_name, and a section between owners is
     * UNAVAILABLE with reason SECTION_MOVING and RetryInfo. A key is 1 to
     * 256 bytes; count 0 means 1, at most 10000.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.firnid.firn.v1.NextSeqResponse> nextSeq(
        io.github.firnid.firn.v1.NextSeqRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getNextSeqMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * NextSeqs serves many keys in one call: one result per item, in order,
     * each refused alone with its reason (a key owned by another node
     * included: the client sends each node its own keys). At most 1000
     * items.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.firnid.firn.v1.NextSeqsResponse> nextSeqs(
        io.github.firnid.firn.v1.NextSeqsRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getNextSeqsMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * CurrentSeq returns a value at or above every value handed out for the
     * key, without handing one out: 0 for a key never used in a section
     * that never moved. Routed as NextSeq.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<io.github.firnid.firn.v1.CurrentSeqResponse> currentSeq(
        io.github.firnid.firn.v1.CurrentSeqRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getCurrentSeqMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_NEXT_ID = 0;
  private static final int METHODID_NEXT_IDS = 1;
  private static final int METHODID_NEXT_RANGE = 2;
  private static final int METHODID_DECODE = 3;
  private static final int METHODID_INFO = 4;
  private static final int METHODID_NEXT_SEQ = 5;
  private static final int METHODID_NEXT_SEQS = 6;
  private static final int METHODID_CURRENT_SEQ = 7;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final IDServiceImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(IDServiceImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_NEXT_ID:
          serviceImpl.nextID((io.github.firnid.firn.v1.NextIDRequest) request,
              (io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.NextIDResponse>) responseObserver);
          break;
        case METHODID_NEXT_IDS:
          serviceImpl.nextIDs((io.github.firnid.firn.v1.NextIDsRequest) request,
              (io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.NextIDsResponse>) responseObserver);
          break;
        case METHODID_NEXT_RANGE:
          serviceImpl.nextRange((io.github.firnid.firn.v1.NextRangeRequest) request,
              (io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.NextRangeResponse>) responseObserver);
          break;
        case METHODID_DECODE:
          serviceImpl.decode((io.github.firnid.firn.v1.DecodeRequest) request,
              (io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.DecodeResponse>) responseObserver);
          break;
        case METHODID_INFO:
          serviceImpl.info((io.github.firnid.firn.v1.InfoRequest) request,
              (io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.InfoResponse>) responseObserver);
          break;
        case METHODID_NEXT_SEQ:
          serviceImpl.nextSeq((io.github.firnid.firn.v1.NextSeqRequest) request,
              (io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.NextSeqResponse>) responseObserver);
          break;
        case METHODID_NEXT_SEQS:
          serviceImpl.nextSeqs((io.github.firnid.firn.v1.NextSeqsRequest) request,
              (io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.NextSeqsResponse>) responseObserver);
          break;
        case METHODID_CURRENT_SEQ:
          serviceImpl.currentSeq((io.github.firnid.firn.v1.CurrentSeqRequest) request,
              (io.grpc.stub.StreamObserver<io.github.firnid.firn.v1.CurrentSeqResponse>) responseObserver);
          break;
        default:
          throw new AssertionError();
      }
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public io.grpc.stub.StreamObserver<Req> invoke(
        io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        default:
          throw new AssertionError();
      }
    }
  }

  private static abstract class IDServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    IDServiceBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return io.github.firnid.firn.v1.FirnProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("IDService");
    }
  }

  private static final class IDServiceFileDescriptorSupplier
      extends IDServiceBaseDescriptorSupplier {
    IDServiceFileDescriptorSupplier() {}
  }

  private static final class IDServiceMethodDescriptorSupplier
      extends IDServiceBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    IDServiceMethodDescriptorSupplier(String methodName) {
      this.methodName = methodName;
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.MethodDescriptor getMethodDescriptor() {
      return getServiceDescriptor().findMethodByName(methodName);
    }
  }

  private static volatile io.grpc.ServiceDescriptor serviceDescriptor;

  public static io.grpc.ServiceDescriptor getServiceDescriptor() {
    io.grpc.ServiceDescriptor result = serviceDescriptor;
    if (result == null) {
      synchronized (IDServiceGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new IDServiceFileDescriptorSupplier())
              .addMethod(getNextIDMethod())
              .addMethod(getNextIDsMethod())
              .addMethod(getNextRangeMethod())
              .addMethod(getDecodeMethod())
              .addMethod(getInfoMethod())
              .addMethod(getNextSeqMethod())
              .addMethod(getNextSeqsMethod())
              .addMethod(getCurrentSeqMethod())
              .build();
        }
      }
    }
    return result;
  }
}
