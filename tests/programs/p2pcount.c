/* A PMPI shim for the tests: counts this process's point-to-point MPI calls (every send and
 * receive entry point of MPI-4, large-count ones included), loaded with LD_PRELOAD.  The
 * collectives' own messages inside the MPI library do not pass through these symbols, so the
 * counts are the program's (and hpcbsp's) point-to-point calls only.  Read with ctypes:
 * hpcbsp_p2p_sends(), hpcbsp_p2p_recvs() (tests/programs/count_p2p.py). */
#include <mpi.h>

static long sends, recvs;

long hpcbsp_p2p_sends(void) { return sends; }
long hpcbsp_p2p_recvs(void) { return recvs; }

#define SEND(NAME, CT)                                                                          \
    int MPI_##NAME(const void *b, CT c, MPI_Datatype t, int d, int g, MPI_Comm m)               \
    { ++sends; return PMPI_##NAME(b, c, t, d, g, m); }
#define ISEND(NAME, CT)                                                                         \
    int MPI_##NAME(const void *b, CT c, MPI_Datatype t, int d, int g, MPI_Comm m, MPI_Request *r) \
    { ++sends; return PMPI_##NAME(b, c, t, d, g, m, r); }

SEND(Send, int) SEND(Ssend, int) SEND(Rsend, int) SEND(Bsend, int)
ISEND(Isend, int) ISEND(Issend, int) ISEND(Irsend, int) ISEND(Ibsend, int)
ISEND(Send_init, int)

int MPI_Recv(void *b, int c, MPI_Datatype t, int s, int g, MPI_Comm m, MPI_Status *st)
{ ++recvs; return PMPI_Recv(b, c, t, s, g, m, st); }
int MPI_Irecv(void *b, int c, MPI_Datatype t, int s, int g, MPI_Comm m, MPI_Request *r)
{ ++recvs; return PMPI_Irecv(b, c, t, s, g, m, r); }
int MPI_Mrecv(void *b, int c, MPI_Datatype t, MPI_Message *msg, MPI_Status *st)
{ ++recvs; return PMPI_Mrecv(b, c, t, msg, st); }
int MPI_Imrecv(void *b, int c, MPI_Datatype t, MPI_Message *msg, MPI_Request *r)
{ ++recvs; return PMPI_Imrecv(b, c, t, msg, r); }
int MPI_Sendrecv(const void *sb, int sc, MPI_Datatype st_, int d, int sg, void *rb, int rc,
                 MPI_Datatype rt, int s, int rg, MPI_Comm m, MPI_Status *st)
{ ++sends; ++recvs; return PMPI_Sendrecv(sb, sc, st_, d, sg, rb, rc, rt, s, rg, m, st); }
int MPI_Sendrecv_replace(void *b, int c, MPI_Datatype t, int d, int sg, int s, int rg,
                         MPI_Comm m, MPI_Status *st)
{ ++sends; ++recvs; return PMPI_Sendrecv_replace(b, c, t, d, sg, s, rg, m, st); }

#if MPI_VERSION >= 4  /* the large-count entry points (MPI-4) */
SEND(Send_c, MPI_Count) SEND(Ssend_c, MPI_Count) SEND(Rsend_c, MPI_Count) SEND(Bsend_c, MPI_Count)
ISEND(Isend_c, MPI_Count) ISEND(Issend_c, MPI_Count) ISEND(Irsend_c, MPI_Count) ISEND(Ibsend_c, MPI_Count)
ISEND(Send_init_c, MPI_Count)
int MPI_Recv_c(void *b, MPI_Count c, MPI_Datatype t, int s, int g, MPI_Comm m, MPI_Status *st)
{ ++recvs; return PMPI_Recv_c(b, c, t, s, g, m, st); }
int MPI_Irecv_c(void *b, MPI_Count c, MPI_Datatype t, int s, int g, MPI_Comm m, MPI_Request *r)
{ ++recvs; return PMPI_Irecv_c(b, c, t, s, g, m, r); }
int MPI_Mrecv_c(void *b, MPI_Count c, MPI_Datatype t, MPI_Message *msg, MPI_Status *st)
{ ++recvs; return PMPI_Mrecv_c(b, c, t, msg, st); }
int MPI_Imrecv_c(void *b, MPI_Count c, MPI_Datatype t, MPI_Message *msg, MPI_Request *r)
{ ++recvs; return PMPI_Imrecv_c(b, c, t, msg, r); }
int MPI_Sendrecv_c(const void *sb, MPI_Count sc, MPI_Datatype st_, int d, int sg, void *rb,
                   MPI_Count rc, MPI_Datatype rt, int s, int rg, MPI_Comm m, MPI_Status *st)
{ ++sends; ++recvs; return PMPI_Sendrecv_c(sb, sc, st_, d, sg, rb, rc, rt, s, rg, m, st); }
int MPI_Sendrecv_replace_c(void *b, MPI_Count c, MPI_Datatype t, int d, int sg, int s, int rg,
                           MPI_Comm m, MPI_Status *st)
{ ++sends; ++recvs; return PMPI_Sendrecv_replace_c(b, c, t, d, sg, s, rg, m, st); }
#endif
