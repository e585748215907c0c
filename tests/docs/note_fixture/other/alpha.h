// Another alpha.h, which defines no Note: a bare `alpha.h` outside lib/ could be either.
