// RUN: ditron-opt %s | ditron-opt | FileCheck %s
// Every ditron_core op, positive cases, inside a Triton kernel (generic form: tt.* is unregistered here).

module {
  // CHECK-LABEL: "tt.func"()
  // CHECK: ^bb0(%[[DATA:.*]]: !tt.ptr<bf16>, %[[SIG:.*]]: !tt.ptr<i32>, %[[EPOCH:.*]]: i32, %[[PTRS:.*]]: tensor<64x!tt.ptr<bf16>>):
  // CHECK: %[[ME:.*]] = "ditron_core.rank"() : () -> i32
  // CHECK: %[[W:.*]] = "ditron_core.num_ranks"() : () -> i32
  // CHECK: %[[PEER_DATA:.*]] = "ditron_core.symm_at"(%[[DATA]], %[[PEER:.*]]) : (!tt.ptr<bf16>, i32) -> !tt.ptr<bf16>
  // CHECK: "ditron_core.symm_at"(%[[PTRS]], %[[PEER]]) : (tensor<64x!tt.ptr<bf16>>, i32) -> tensor<64x!tt.ptr<bf16>>
  // CHECK: %[[TOK:.*]] = "ditron_core.wait"(%[[SIG]], %[[EPOCH]]) {scope = "sys", semantic = "acquire"} : (!tt.ptr<i32>, i32) -> i32
  // CHECK: "ditron_core.wait"(%[[SIG]], %[[EPOCH]]) {scope = "gpu", semantic = "relaxed"}
  // CHECK: "ditron_core.consume_token"(%[[PEER_DATA]], %[[TOK]]) : (!tt.ptr<bf16>, i32) -> !tt.ptr<bf16>
  // CHECK: "ditron_core.notify"(%[[SIG]], %[[PEER]], %[[EPOCH]]) {op = "set", scope = "sys", semantic = "release"} : (!tt.ptr<i32>, i32, i32) -> ()
  // CHECK: "ditron_core.notify"(%[[SIG]], %[[ME]], %{{.*}}) {op = "add", scope = "gpu", semantic = "relaxed"}
  // CHECK: "ditron_core.barrier_all"(%[[SIG]]) {scope = "sys"} : (!tt.ptr<i32>) -> ()
  // CHECK: "ditron_core.barrier_all"(%[[SIG]]) {scope = "gpu"}
  "tt.func"() ({
  ^bb0(%data: !tt.ptr<bf16>, %sig: !tt.ptr<i32>, %epoch: i32, %ptrs: tensor<64x!tt.ptr<bf16>>):
    %me = "ditron_core.rank"() : () -> i32
    %w = "ditron_core.num_ranks"() : () -> i32
    %c1 = arith.constant 1 : i32
    %next = arith.addi %me, %c1 : i32
    %peer = arith.remsi %next, %w : i32
    %pd = "ditron_core.symm_at"(%data, %peer) : (!tt.ptr<bf16>, i32) -> !tt.ptr<bf16>
    %pp = "ditron_core.symm_at"(%ptrs, %peer) : (tensor<64x!tt.ptr<bf16>>, i32) -> tensor<64x!tt.ptr<bf16>>
    %tok = "ditron_core.wait"(%sig, %epoch) {scope = "sys", semantic = "acquire"} : (!tt.ptr<i32>, i32) -> i32
    %tok2 = "ditron_core.wait"(%sig, %epoch) {scope = "gpu", semantic = "relaxed"} : (!tt.ptr<i32>, i32) -> i32
    %ready = "ditron_core.consume_token"(%pd, %tok) : (!tt.ptr<bf16>, i32) -> !tt.ptr<bf16>
    "ditron_core.notify"(%sig, %peer, %epoch) {op = "set", scope = "sys", semantic = "release"} : (!tt.ptr<i32>, i32, i32) -> ()
    "ditron_core.notify"(%sig, %me, %c1) {op = "add", scope = "gpu", semantic = "relaxed"} : (!tt.ptr<i32>, i32, i32) -> ()
    "ditron_core.barrier_all"(%sig) {scope = "sys"} : (!tt.ptr<i32>) -> ()
    "ditron_core.barrier_all"(%sig) {scope = "gpu"} : (!tt.ptr<i32>) -> ()
    "tt.return"() : () -> ()
  }) {sym_name = "kernel", function_type = (!tt.ptr<bf16>, !tt.ptr<i32>, i32, tensor<64x!tt.ptr<bf16>>) -> ()} : () -> ()

  // The core ops are also legal in a func.func, on plain integer and tensor values.
  // CHECK-LABEL: func.func @in_func
  // CHECK: "ditron_core.consume_token"(%arg0, %arg1) : (tensor<16xf32>, i32) -> tensor<16xf32>
  func.func @in_func(%x: tensor<16xf32>, %t: i32) -> tensor<16xf32> {
    %y = "ditron_core.consume_token"(%x, %t) : (tensor<16xf32>, i32) -> tensor<16xf32>
    return %y : tensor<16xf32>
  }
}
