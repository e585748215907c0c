// Note [Gamma]
// Defined here. Right: Note [Alpha] (alpha.h), (Note [Alpha], lib/alpha.h), Note [Beta] in
// lib/alpha.h, Note [Gamma] without a file.
//
// Note [Twice]
// Defined a second time.
//
// Note [A title that
// wraps] (gamma.cc): broken, the title wraps onto this line and is defined nowhere.

int main() { return 0; }  // Note [Alpha] in lib/gamma.cc: broken, the wrong file.
