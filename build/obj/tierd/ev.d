build/obj/tierd/ev.o: tierd/ev.c tierd/ev.h
tierd/ev.h:
