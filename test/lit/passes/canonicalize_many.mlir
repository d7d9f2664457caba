// A long program: 300 collectives over a size-1 axis in a chain and 300 dead matmuls. All fold (the rewrite
// driver has no fixed round limit that a long program could exceed).
// RUN: %PYTHON -c "import sys; n = 300; t = 'tensor<8x8xf32>'; print('module attributes {ditron.mesh = {axes = [\"dp\"], shape = array<i64: 1>}} {'); print('func.func @long(%%v0: ' + t + ') -> ' + t + ' {'); [print(f'  %%v{i + 1} = \"ditron_task.all_reduce\"(%%v{i}) {{axis = \"dp\", reduce = \"sum\"}} : ({t}) -> {t}') for i in range(n)]; [print(f'  %%d{i} = \"ditron_task.matmul\"(%%v0, %%v{n}) : ({t}, {t}) -> {t}') for i in range(n)]; print(f'  return %%v{n} : {t}'); print('}'); print('}')" > %t.mlir
// RUN: ditron-opt %t.mlir --pass-pipeline=ditron-canonicalize | FileCheck %s

// CHECK-LABEL: func.func @long
// CHECK-NEXT: return %arg0
// CHECK-NEXT: }
