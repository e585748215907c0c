// A fixture for tests/docs/note_citations_test.sh: Notes and citations, some broken on purpose.
//
// Note [Alpha]
// Defined here, by a comment line that opens with the title.
//
// Note [Beta]: defined here too, by a comment that opens with the title and a colon and goes
// on in the next line.
//
// Note [Twice]
// Defined here and again in gamma.cc: broken.
