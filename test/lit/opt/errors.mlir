// Driver errors: one line 'error: ...' on stderr (no location where there is none) and a failing exit code.
// RUN: not ditron-opt %s --pass-pipeline=ditron-canonicalise 2>&1 | FileCheck %s --check-prefix=TYPO
// RUN: not ditron-opt %s --pass-pipeline=xyzzy 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not ditron-opt %s --pass-pipeline='ditron-canonicalize{upstream=maybe}' 2>&1 | FileCheck %s --check-prefix=VALUE
// RUN: not ditron-opt %s --pass-pipeline='ditron-verify{strict=true}' 2>&1 | FileCheck %s --check-prefix=OPTION
// RUN: not ditron-opt %s --pass-pipeline='ditron-verify{' 2>&1 | FileCheck %s --check-prefix=BRACE
// RUN: not ditron-opt %s --pass-pipeline='ditron-verify}' 2>&1 | FileCheck %s --check-prefix=CLOSE
// RUN: not ditron-opt %s --pass-pipeline='builtin.module(ditron-verify' 2>&1 | FileCheck %s --check-prefix=PAREN
// RUN: not ditron-opt %s --pass-pipeline='ditron-verify,,ditron-canonicalize' 2>&1 | FileCheck %s --check-prefix=EMPTY
// RUN: not ditron-opt %s --pass-pipeline='ditron-verify{}x' 2>&1 | FileCheck %s --check-prefix=TRAILING
// RUN: not ditron-opt %s --pass-pipeline='ditron-check{upstream=false}' 2>&1 | FileCheck %s --check-prefix=NAMED
// RUN: not ditron-opt %s --pass-pipeline='ditron-verify,ditron-tile{all-reduce=push,block-m=64}' 2>&1 | FileCheck %s --check-prefix=COMMA
// RUN: not ditron-opt %s --pass-pipeline='ditron-tile{all-reduce=push , block-m=64}' 2>&1 | FileCheck %s --check-prefix=COMMA
// RUN: not ditron-opt %s.missing 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not ditron-opt %s --no-such-flag 2>&1 | FileCheck %s --check-prefix=FLAG
// RUN: not ditron-opt %s %s 2>&1 | FileCheck %s --check-prefix=TWO
// RUN: not ditron-opt %s --verify-each=maybe 2>&1 | FileCheck %s --check-prefix=BOOL
// RUN: not ditron-opt %s --split-input-file 2>&1 | FileCheck %s --check-prefix=PARSE
// RUN: not ditron-opt < %s --split-input-file 2>&1 | FileCheck %s --check-prefix=STDIN

// TYPO: error: unknown pass or pipeline 'ditron-canonicalise'; did you mean 'ditron-canonicalize'?
// UNKNOWN: error: unknown pass or pipeline 'xyzzy'; see ditron-opt --list-passes
// VALUE: error: pass 'ditron-canonicalize': option 'upstream' expects true or false, got 'maybe'
// OPTION: error: pass 'ditron-verify' has no option 'strict' (options: none)
// BRACE: error: unbalanced braces in pass pipeline 'ditron-verify{'
// CLOSE: error: unbalanced '}' in pass pipeline 'ditron-verify}'
// PAREN: error: unbalanced braces in pass pipeline 'builtin.module(ditron-verify'
// EMPTY: error: empty pass name in pipeline 'ditron-verify,,ditron-canonicalize'
// TRAILING: error: malformed pass 'ditron-verify{}x': options go in braces at the end, like {opt=value}
// NAMED: error: pipeline 'ditron-check' takes no options; set them on its passes
// COMMA: error: pass 'ditron-tile': options are separated by spaces, not commas: write ditron-tile{all-reduce=push block-m=64}
// MISSING: error: cannot open input file '{{.*}}errors.mlir.missing': No such file or directory
// FLAG: error: unrecognized arguments: --no-such-flag (see ditron-opt --help)
// TWO: error: unrecognized arguments: {{.*}}errors.mlir (see ditron-opt --help)
// BOOL: error: argument --verify-each: expects true or false, got 'maybe' (see ditron-opt --help)

// Malformed IR: the parser's message at its location, in the file or on stdin.
// PARSE: {{.*}}errors.mlir:[[# @LINE + 3]]:33: error: use of undeclared SSA value name
// STDIN: <stdin>:[[# @LINE + 2]]:33: error: use of undeclared SSA value name
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = "ditron_task.all_reduce"(%y) {axis = "dp", reduce = "sum"} : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// PARSE-NEXT: {{.*}}errors.mlir:[[# @LINE + 2]]:3: error: custom op 'ditron_task.matmul' is unknown: ditron ops have only the generic form, like "ditron_task.matmul"(%operands) {attributes} : (types) -> types
func.func @g(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  ditron_task.matmul %x, %x : tensor<8x8xf32>
  return %x : tensor<8x8xf32>
}

// -----

// PARSE-NEXT: {{.*}}errors.mlir:[[# @LINE + 1]]:1: error: expected operation name in quotes
}
