build/obj/store/idx.o: store/idx.c store/idx.h store/tier.h
store/idx.h:
store/tier.h:
