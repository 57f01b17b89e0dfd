build/obj/kernels/kvk_cpu.o: kernels/kvk_cpu.c kernels/kvk.h
kernels/kvk.h:
